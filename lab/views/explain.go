package views

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/service"
)

// explain says in words what a walk's result means for the connection and
// for what the pod sees, and returns what it wrote.
func (v *Views) explain(w io.Writer, pkt tracePacket, port *service.Port, wk walk) string {
	var b strings.Builder
	v.explainTo(&b, pkt, port, wk)
	_, _ = io.WriteString(w, b.String())
	return strings.TrimSpace(b.String())
}

func (v *Views) explainTo(w io.Writer, pkt tracePacket, port *service.Port, wk walk) {
	result, dnat, redirect, masq, delivered := wk.result, wk.dnat, wk.redirect, wk.masq, wk.delivered
	node := v.net.Plan().Node.Addr
	fmt.Fprintln(w)
	switch {
	case redirect != 0:
		text := fmt.Sprintf("REDIRECT: the kernel rewrites the destination to port %d of the node, where svcproxy's userspace proxy listens", redirect)
		if port != nil {
			text += " for " + port.Name.String()
		}
		text += fmt.Sprintf(". The connection ends in svcproxy, which opens a second connection of its own, from %s, to one endpoint (round-robin", v.net.WithName(node))
		if port != nil && port.Service.Affinity.ClientIP {
			text += "; ClientIP affinity keeps a client on the endpoint it got first"
		}
		para(w, text+"):")
		if port != nil {
			for _, ep := range v.userspaceEndpoints(pkt, port) {
				fmt.Fprintf(w, "  %s%s\n", ep, v.nameSuffix(ep.Addr()))
			}
		}
		para(w, fmt.Sprintf("The pod sees the node (%s) as its client. svclab conntrack shows the two connections.", node))
	case dnat.IsValid() && masq:
		para(w, fmt.Sprintf("DNAT to %s, then MASQUERADE: the node rewrites the source to its own address as the packet leaves, so the pod sees %s and replies to the node, which undoes both rewrites (conntrack). %s",
			dnat.String()+v.nameSuffix(dnat.Addr()), v.net.WithName(node), masqReason(pkt, dnat, port)))
	case dnat.IsValid():
		para(w, fmt.Sprintf("DNAT to %s: the kernel rewrites the destination, and conntrack remembers it for every later packet of the connection, both ways. The source is kept: the pod sees %s.",
			dnat.String()+v.nameSuffix(dnat.Addr()), v.net.WithName(pkt.src)))
	case strings.Contains(result, "REJECT"):
		para(w, "REJECT: nothing is there to take the connection (a Service without endpoints, or a port the ClusterIP does not have), so the node answers at once with ICMP port unreachable, \"connection refused\", instead of letting the client wait for a timeout.")
	case strings.Contains(result, "DROP"):
		para(w, "DROP: the packet is thrown away without an answer; the client retries until it times out. This is traffic policy Local (externalTrafficPolicy or internalTrafficPolicy) with no endpoint on this node.")
	case delivered:
		para(w, "No rule rewrote the packet: it is delivered to the node itself.")
	default:
		para(w, "No rule changed the packet: it goes on to its destination unchanged.")
	}
}

// ipvsResult says what IPVS does with a packet the rules delivered to a
// virtual server (traceIPVS), and returns what it wrote.
func (v *Views) ipvsResult(w io.Writer, pkt tracePacket, wk walk) string {
	who := v.net.WithName(pkt.src)
	if wk.masq {
		who = v.net.WithName(v.net.Plan().Node.Addr) + " (the rules marked it for MASQUERADE)"
	}
	fmt.Fprintln(w)
	result := fmt.Sprintf("IPVS rewrites the destination to the real server it picked (a DNAT, which conntrack remembers); the pod sees %s.", who)
	para(w, result)
	return result
}

// para writes text as a paragraph wrapped at 80 columns.
func para(w io.Writer, text string) {
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > 80 {
			fmt.Fprintln(w, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		fmt.Fprintln(w, line)
	}
}

// nameSuffix is " (web-0)" for a lab host's address, "" for another.
func (v *Views) nameSuffix(a netip.Addr) string {
	if n := v.net.HostName(a); n != "" {
		return " (" + n + ")"
	}
	return ""
}

// masqReason says why a packet was marked for masquerade.
func masqReason(pkt tracePacket, dnat netip.AddrPort, port *service.Port) string {
	switch {
	case pkt.src == dnat.Addr():
		return "Why: the pod reached itself through the Service (hairpin); without the rewrite it would answer itself directly, and the reply would not match the connection."
	case pkt.local:
		return "Why: the node's own connections leave with the node's address."
	case port != nil && port.NodePort != 0 && pkt.dst.Port() == port.NodePort:
		return "Why: a NodePort with externalTrafficPolicy Cluster may send the connection to a pod on another node, whose reply must come back through this one."
	}
	return "Why: the client is outside the cluster's pod range (--cluster-cidr); its replies must come back through the node."
}
