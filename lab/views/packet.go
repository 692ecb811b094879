package views

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"

	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/service"
)

// tracePacket is a packet as both tracers want it.
type tracePacket struct {
	proto    string // "tcp" or "udp"
	src      netip.Addr
	dst      netip.AddrPort
	local    bool   // sent by the node itself
	inIface  string // the node's end of the sender's link
	fromName string
	node     *service.Node // the node's Node object in the Snapshot: topology hints
}

func (p tracePacket) iptables(pick int) kiptables.Packet {
	return kiptables.Packet{Proto: p.proto, Src: p.src, Dst: p.dst, Local: p.local, InIface: p.inIface, Pick: pick}
}

func (p tracePacket) nftables(pick int) knft.Packet {
	return knft.Packet{Proto: p.proto, Src: p.src, Dst: p.dst, Local: p.local, Pick: pick}
}

// tracePacket builds the packet of opts and finds the service port it is for
// (nil when the destination is no Service's).
func (v *Views) tracePacket(snap *service.Snapshot, opts TraceOptions) (tracePacket, *service.Port, error) {
	h, ok := v.net.Host(opts.From)
	if !ok {
		return tracePacket{}, nil, fmt.Errorf("host %q: no such lab host (want one of %s)", opts.From, strings.Join(v.net.HostNames(), ", "))
	}
	plan := v.net.Plan()
	pkt := tracePacket{proto: "tcp", src: h.Addr, fromName: h.Name, inIface: h.NodeLink, local: h.Name == plan.Node.Name, node: snap.Node()}
	// A host of another node (the client and the outside host when the
	// node traced is a worker, or another node itself) reaches this node
	// over the switch.
	elsewhere := !pkt.local && (h.Role == topology.RoleNode || plan.Gateway.Name != "")
	if elsewhere {
		pkt.inIface = plan.Uplink
	}
	pkt, port, err := v.targetPacket(snap, opts, pkt)
	if err == nil && elsewhere && pkt.dst.Addr() != plan.Node.Addr && pkt.dst.Addr() != plan.Node.Addr6 {
		first := h.Name
		if h.Role != topology.RoleNode {
			first = plan.Gateway.Name
		}
		return pkt, nil, fmt.Errorf("trace %s to %s on %s: %s's packets meet %s's rules first, which send a Service's traffic on to a pod's address, "+
			"so %s's Service rules never see them; trace with --node %s, or trace what reaches %s: its own address (a NodePort, %s:PORT)",
			h.Name, pkt.dst, plan.Node.Name, h.Name, first, plan.Node.Name, first, plan.Node.Name, plan.Node.Addr)
	}
	return pkt, port, err
}

// targetPacket is pkt addressed to opts.Target, and the service port it is
// for (nil when the destination is no Service's).
func (v *Views) targetPacket(snap *service.Snapshot, opts TraceOptions, pkt tracePacket) (tracePacket, *service.Port, error) {
	rest := opts.Target
	scheme, after, hasScheme := strings.Cut(rest, "://")
	if hasScheme {
		switch scheme {
		case "tcp", "http":
		case "udp":
			pkt.proto = "udp"
		default:
			return pkt, nil, fmt.Errorf("target %q: scheme %q: want tcp or udp", opts.Target, scheme)
		}
		rest = after
	}
	host, portStr, hasPort := strings.Cut(rest, ":")
	if ip, err := netip.ParseAddr(host); err == nil {
		n, err := strconv.ParseUint(portStr, 10, 16)
		if !hasPort || err != nil || n == 0 {
			return pkt, nil, fmt.Errorf("target %q: an address needs a port (198.19.0.1:30080)", opts.Target)
		}
		pkt.dst = netip.AddrPortFrom(ip, uint16(n))
		proto := service.Protocol(strings.ToUpper(pkt.proto))
		if p, ok := snap.PortByVIP(service.VIP{Protocol: proto, Addr: pkt.dst}); ok {
			return pkt, p, nil
		}
		for _, p := range snap.Ports() {
			if p.NodePort == pkt.dst.Port() && p.Protocol == proto {
				return pkt, p, nil
			}
		}
		return pkt, nil, nil
	}
	svc, err := FindService(snap, host)
	if err != nil {
		return pkt, nil, err
	}
	if svc.Headless || len(svc.ClusterIPs) == 0 {
		return pkt, nil, fmt.Errorf("service %s has no ClusterIP (%s): its name resolves to its pods, and no rule is involved", svc.NamespacedName, describeService(svc))
	}
	port, err := FindPort(svc, portStr)
	if n, nerr := strconv.ParseUint(portStr, 10, 16); err != nil && nerr == nil && n > 0 {
		// A port the Service does not have: what happens to it is a lesson too.
		pkt.dst = netip.AddrPortFrom(svc.ClusterIPs[0], uint16(n))
		return pkt, nil, nil
	}
	if err != nil {
		return pkt, nil, err
	}
	if !hasScheme {
		pkt.proto = strings.ToLower(string(port.Protocol))
	}
	pkt.dst = netip.AddrPortFrom(svc.ClusterIPs[0], port.Port)
	return pkt, port, nil
}
