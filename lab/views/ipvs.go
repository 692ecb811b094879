package views

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strings"

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

var ipvsVSRE = regexp.MustCompile(`^(TCP|UDP)\s+(\S+)\s+(\S+)`)

// traceIPVS says what IPVS does with a packet the rules delivered to the
// node: the virtual server for its destination and the real servers its
// scheduler picks from. It reports whether IPVS has one.
func (v *Views) traceIPVS(ctx context.Context, w io.Writer, pkt tracePacket) (TraceHop, bool) {
	out, err := v.net.NodeOutput(ctx, "ipvsadm", "-ln")
	if err != nil {
		return TraceHop{}, false // no IPVS: nothing more happens to the packet
	}
	var vs, rss []string
	in := false
	for _, line := range strings.Split(out, "\n") {
		if m := ipvsVSRE.FindStringSubmatch(line); m != nil {
			in = strings.EqualFold(m[1], pkt.proto) && m[2] == pkt.dst.String()
			if in {
				vs = m[1:]
			}
			continue
		}
		if in && strings.HasPrefix(line, "  ->") {
			rss = append(rss, strings.TrimSpace(strings.TrimPrefix(line, "  ->")))
		}
	}
	if vs == nil {
		return TraceHop{}, false
	}
	hop := TraceHop{Tracer: "IPVS", Chain: "INPUT", Rule: fmt.Sprintf("virtual server %s %s, scheduler %s", vs[0], vs[1], vs[2])}
	fmt.Fprintln(w)
	para(w, fmt.Sprintf("The destination is local (on svcp-ipvs0), so the packet reaches INPUT, where IPVS has a virtual server for it: %s %s, scheduler %s. It picks one real server:", vs[0], vs[1], vs[2]))
	for _, rs := range rss {
		f := strings.Fields(rs)
		name := ""
		if ap, err := netip.ParseAddrPort(f[0]); err == nil {
			if n := v.net.HostName(ap.Addr()); n != "" {
				name = " (" + n + ")"
			}
		}
		fmt.Fprintf(w, "  -> %s%s  %s\n", f[0], name, strings.Join(f[1:], " "))
		hop.Note += " -> " + f[0] + name
	}
	hop.Note = "real servers:" + hop.Note
	return hop, true
}
