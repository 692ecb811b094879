package views

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/svcproxy/svcproxy/internal/nsenter"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/service"
)

// hasIPv6 says whether svc has an IPv6 address that svcproxy serves: a
// ClusterIP, an external IP or a load balancer IP.
func hasIPv6(svc *service.Service) bool {
	for _, ip := range append(append(append([]netip.Addr{}, svc.ClusterIPs...), svc.ExternalIPs...), svc.LoadBalancerIPs...) {
		if ip.Is6() && !ip.Is4In6() {
			return true
		}
	}
	return false
}

// serviceVIPs are the addresses and ports where svc's traffic arrives:
// ClusterIP:port, external IPs, and NodePorts on each node address, each as
// `ipvsadm -ln` starts a virtual server's line ("TCP  198.18.0.20:80 ").
func serviceVIPs(svc *service.Service, nodeAddrs []netip.Addr) []string {
	var out []string
	for _, p := range svc.Ports {
		for _, ip := range append(append(append([]netip.Addr{}, svc.ClusterIPs...), svc.ExternalIPs...), svc.LoadBalancerIPs...) {
			out = append(out, strings.ToUpper(string(p.Protocol))+"  "+netip.AddrPortFrom(ip, p.Port).String()+" ")
		}
		if p.NodePort != 0 {
			for _, a := range nodeAddrs {
				out = append(out, strings.ToUpper(string(p.Protocol))+"  "+netip.AddrPortFrom(a, p.NodePort).String()+" ")
			}
		}
	}
	return out
}

// filterIPVS keeps the header of `ipvsadm -ln` and the virtual servers whose
// line starts with one of vips ("TCP  198.18.0.20:80 "), with their real
// servers.
func filterIPVS(out string, vips []string) string {
	var b strings.Builder
	keep := false
	for i, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		switch {
		case i < 3 || strings.HasPrefix(line, "  ->") && keep:
		case strings.HasPrefix(line, "  ->"):
			continue
		default:
			keep = false
			for _, v := range vips {
				if strings.HasPrefix(line, v) {
					keep = true
				}
			}
			if !keep {
				continue
			}
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// ipvsServer is a virtual server of the node's IPVS, read through
// kernel/ipvs: the hop `svclab trace` shows, and its real servers with
// their weights.
type ipvsServer struct {
	hop       TraceHop
	scheduler string
	real      []netip.AddrPort
	weights   []int
}

// pick is the real server --pick N follows: the Nth, in the table's order
// (rr's order, when nothing has been scheduled yet).
func (vs ipvsServer) pick(n int) (netip.AddrPort, bool) {
	if len(vs.real) == 0 {
		return netip.AddrPort{}, false
	}
	return vs.real[n%len(vs.real)], true
}

// ways are the real servers a new connection may go to, with their share:
// even for rr, by weight for wrr; the other schedulers decide by the
// servers' load or a hash of the address, which a trace cannot know, so
// their shares are left at 0.
func (vs ipvsServer) ways(nameSuffix func(netip.Addr) string) []TraceWay {
	total := 0
	for _, w := range vs.weights {
		total += w
	}
	var out []TraceWay
	for i, rs := range vs.real {
		way := TraceWay{Result: "IPVS sends it to " + rs.String() + nameSuffix(rs.Addr())}
		switch {
		case vs.scheduler == "rr":
			way.P = 1 / float64(len(vs.real))
		case vs.scheduler == "wrr" && total > 0:
			way.P = float64(vs.weights[i]) / float64(total)
		}
		out = append(out, way)
	}
	return out
}

// choice says how the scheduler chooses, for TraceReport.Choice.
func (vs ipvsServer) choice() string {
	switch vs.scheduler {
	case "rr":
		return "IPVS rr: each real server in turn"
	case "wrr":
		return "IPVS wrr: in turn, by weight"
	}
	return "IPVS " + vs.scheduler + ": by the servers' connections or a hash of the addresses, not in a fixed share"
}

// traceIPVS says what IPVS does with a packet the rules delivered to the
// node: the virtual server for its destination and the real servers its
// scheduler picks from. It reports whether IPVS has one. The node's IPVS is
// read with kernel/ipvs (netlink, as ipvsadm reads it) from a thread in the
// node's namespace.
func (v *Views) traceIPVS(ctx context.Context, w io.Writer, pkt tracePacket) (ipvsServer, bool) {
	var vs kipvs.VirtualServer
	var reals []kipvs.RealServer
	found := false
	err := nsenter.Run(filepath.Join(topology.NetnsDir, v.net.NodeNamespace()), func() error {
		k, err := kipvs.New()
		if err != nil {
			return err
		}
		defer k.Close()
		vs, reals, found, err = findIPVS(ctx, k, pkt)
		return err
	})
	if err != nil || !found {
		return ipvsServer{}, false // no IPVS, or no virtual server: nothing more happens to the packet
	}
	return writeIPVS(w, vs, reals, v.net.HostName), true
}

// findIPVS finds the virtual server of pkt's destination in ipvs, and its
// real servers in the kernel's order.
func findIPVS(ctx context.Context, ipvs kipvs.Interface, pkt tracePacket) (kipvs.VirtualServer, []kipvs.RealServer, bool, error) {
	vss, err := ipvs.VirtualServers(ctx)
	if err != nil {
		return kipvs.VirtualServer{}, nil, false, err
	}
	for _, vs := range vss {
		if strings.EqualFold(string(vs.Protocol), pkt.proto) && vs.Addr == pkt.dst {
			reals, err := ipvs.RealServers(ctx, vs.Key)
			return vs, reals, err == nil, err
		}
	}
	return kipvs.VirtualServer{}, nil, false, nil
}

// writeIPVS writes what IPVS does with the packet, each real server as
// `ipvsadm -ln` lists it and named by hostName, and returns the virtual
// server as the trace keeps it.
func writeIPVS(w io.Writer, vs kipvs.VirtualServer, reals []kipvs.RealServer, hostName func(netip.Addr) string) ipvsServer {
	srv := ipvsServer{scheduler: vs.Scheduler, hop: TraceHop{Tracer: "IPVS", Chain: "INPUT",
		Rule: fmt.Sprintf("virtual server %s %s, scheduler %s", vs.Protocol, vs.Addr, vs.Scheduler)}}
	fmt.Fprintln(w)
	para(w, fmt.Sprintf("The destination is local (on svcp-ipvs0), so the packet reaches INPUT, where IPVS has a virtual server for it: %s %s, scheduler %s. It picks one real server:", vs.Protocol, vs.Addr, vs.Scheduler))
	for _, rs := range reals {
		name := ""
		if n := hostName(rs.Addr.Addr()); n != "" {
			name = " (" + n + ")"
		}
		srv.real, srv.weights = append(srv.real, rs.Addr), append(srv.weights, rs.Weight)
		fmt.Fprintf(w, "  -> %s%s  Masq %d %d %d\n", rs.Addr, name, rs.Weight, rs.ActiveConns, rs.InactiveConns)
		srv.hop.Note += " -> " + rs.Addr.String() + name
	}
	srv.hop.Note = "real servers:" + srv.hop.Note
	return srv
}
