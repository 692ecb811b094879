package lab

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/service"
)

// TraceOptions are the arguments of `svclab trace FROM TARGET`.
type TraceOptions struct {
	// From is the lab host that sends the packet: client, web-0, outside, node.
	From string
	// Target is a Service and port ("web", "web:http", "web:80",
	// "kube-system/kube-dns:53", "udp://echo") or an address and port
	// ("198.19.0.1:30080").
	Target string
	// Pick is which way of the random choices to print in full: 0 follows the
	// first endpoint, 1 the second...
	Pick int
}

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

// Trace walks one packet (the first of a new connection) from a lab host to
// a Service through the rules the node's kernel holds now: it reads them
// (iptables-save, nft list table ip svcproxy), loads them into the tracers of
// kernel/iptables and kernel/nftables, and writes which chain and rule sent
// the packet where, whether it was DNATed, REDIRECTed or masqueraded, every
// way the random choices can go, and what the pod will see.
func (l *Lab) Trace(ctx context.Context, opts TraceOptions) error {
	_, err := l.TraceReport(ctx, opts)
	return err
}

// TraceReport is Trace, which it writes to Stdout too, returned as data as
// well: the hops `svclab web` draws.
func (l *Lab) TraceReport(ctx context.Context, opts TraceOptions) (*TraceReport, error) {
	mode, err := l.Mode()
	if err != nil {
		return nil, err
	}
	snap, err := l.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	pkt, port, err := l.tracePacket(snap, opts)
	if err != nil {
		return nil, err
	}
	var text strings.Builder
	w := io.MultiWriter(l.cfg.Stdout, &text)
	rep := &TraceReport{From: pkt.fromName, Src: pkt.src.String(), Dst: pkt.dst.String(), Proto: strings.ToUpper(pkt.proto),
		Mode: mode, InIface: pkt.inIface, Local: pkt.local}
	defer func() { rep.Text = text.String() }()
	if port != nil {
		rep.Port = port.Name.String()
		fmt.Fprintf(w, "%s is %s/%s; svcproxy runs %s mode.\n", port.Name, pkt.dst, strings.ToUpper(pkt.proto), mode)
	} else {
		fmt.Fprintf(w, "%s/%s is no Service's ClusterIP; svcproxy runs %s mode.\n", pkt.dst, strings.ToUpper(pkt.proto), mode)
	}
	if mode == "socklb" {
		// The socket hook comes first, at connect() (socklbtrace.go).
		done, err := l.traceSocketLB(ctx, w, pkt, opts, rep)
		if err != nil || done {
			return rep, err
		}
	}
	if pkt.local {
		para(w, fmt.Sprintf("The first packet of a new connection from the node itself (%s), through the node's rules:", pkt.src))
	} else {
		para(w, fmt.Sprintf("The first packet of a new connection from %s (%s), arriving at the node on %s:", pkt.fromName, pkt.src, pkt.inIface))
	}
	fmt.Fprintln(w)

	local, err := l.nodeAddrs(ctx)
	if err != nil {
		return nil, err
	}
	// nftables first: svcproxy's nat chains run at priority -101, before
	// iptables' nat table (-100); a DNAT there is final.
	if list, err := l.net.NodeOutput(ctx, "nft", "list", "table", "ip", "svcproxy"); err == nil {
		tab, err := parseNFTList(list)
		if err != nil {
			return nil, err
		}
		f := knft.NewFake(tab.Name)
		if err := tab.load(f); err != nil {
			return nil, fmt.Errorf("load the node's nftables table into the tracer: %w", err)
		}
		f.SetLocalAddrs(local...)
		tr, err := f.Trace(pkt.nftables(opts.Pick))
		if err != nil {
			return nil, err
		}
		for _, st := range tr.Steps {
			rep.Hops = append(rep.Hops, TraceHop{Tracer: "nftables", Table: tab.Family + " " + tab.Name, Chain: st.Chain, Rule: st.Rule, Note: st.Note})
		}
		walk := tr.String()
		if !pkt.local {
			walk = strings.Replace(walk, ", arriving from outside", ", arriving on "+pkt.inIface, 1)
		}
		fmt.Fprintf(w, "nftables (table ip svcproxy):\n%s", walk)
		all, err := f.TraceAll(pkt.nftables(0))
		if err != nil {
			return nil, err
		}
		var results []wayResult
		for _, t := range all {
			results = append(results, wayResult{t.Result(), t.DNAT, t.Probability})
		}
		rep.Ways = l.writeWays(w, results)
		if tr.DNAT.IsValid() || tr.Verdict != "ACCEPT" {
			rep.Result = l.explain(w, pkt, port, tr.Result(), tr.DNAT, 0, tr.Masquerade, tr.Delivered)
			return rep, nil
		}
		fmt.Fprintf(w, "\nNo DNAT in nftables: the packet goes on to iptables' nat table.\n\n")
	}

	save, err := l.net.NodeOutput(ctx, "iptables-save")
	if err != nil {
		return nil, err
	}
	f := kiptables.NewFake()
	if err := f.Restore(ctx, []byte(save)); err != nil {
		return nil, fmt.Errorf("load the node's iptables rules into the tracer: %w", err)
	}
	f.SetLocalAddrs(local...)
	tr, err := f.Trace(pkt.iptables(opts.Pick))
	if err != nil {
		return nil, err
	}
	for _, st := range tr.Steps {
		rep.Hops = append(rep.Hops, TraceHop{Tracer: "iptables", Table: string(st.Table), Chain: st.Chain, Rule: st.Rule, Note: st.Note})
	}
	fmt.Fprintf(w, "iptables:\n%s", tr)
	all, err := f.TraceAll(pkt.iptables(0))
	if err != nil {
		return nil, err
	}
	var results []wayResult
	for _, t := range all {
		results = append(results, wayResult{t.Result(), t.DNAT, t.Probability})
	}
	rep.Ways = l.writeWays(w, results)
	if tr.Redirect == 0 && !tr.DNAT.IsValid() && tr.Verdict == "ACCEPT" && tr.Delivered && port != nil {
		if hop, ok := l.traceIPVS(ctx, w, pkt); ok {
			rep.Hops = append(rep.Hops, hop)
			who := l.net.WithName(pkt.src)
			if tr.Masquerade {
				who = l.net.WithName(l.cfg.Plan.Node.Addr) + " (the rules marked it for MASQUERADE)"
			}
			fmt.Fprintln(w)
			rep.Result = fmt.Sprintf("IPVS rewrites the destination to the real server it picked (a DNAT, which conntrack remembers); the pod sees %s.", who)
			para(w, rep.Result)
			return rep, nil
		}
	}
	rep.Result = l.explain(w, pkt, port, tr.Result(), tr.DNAT, tr.Redirect, tr.Masquerade, tr.Delivered)
	return rep, nil
}

// wayResult is one way a trace can go.
type wayResult struct {
	result string
	dnat   netip.AddrPort
	p      float64
}

// writeWays lists every way the random choices can go, when there is more
// than one.
func (l *Lab) writeWays(w io.Writer, ways []wayResult) []TraceWay {
	var out []TraceWay
	for _, way := range ways {
		out = append(out, TraceWay{Result: way.result, P: way.p})
	}
	if len(ways) < 2 {
		return out
	}
	fmt.Fprintf(w, "\nEvery way the random choices can go (--pick N prints way N):\n")
	for i, way := range ways {
		r := way.result
		if way.dnat.IsValid() {
			if n := l.net.HostName(way.dnat.Addr()); n != "" {
				r = strings.Replace(r, way.dnat.String(), way.dnat.String()+" ("+n+")", 1)
			}
		}
		fmt.Fprintf(w, "  %d  %-40s p=%.3f\n", i, r, way.p)
		out[i].Result = r
	}
	return out
}

// tracePacket builds the packet of opts and finds the service port it is for
// (nil when the destination is no Service's).
func (l *Lab) tracePacket(snap *service.Snapshot, opts TraceOptions) (tracePacket, *service.Port, error) {
	h, ok := l.net.Host(opts.From)
	if !ok {
		return tracePacket{}, nil, fmt.Errorf("host %q: no such lab host (want one of %s)", opts.From, strings.Join(l.net.HostNames(), ", "))
	}
	pkt := tracePacket{proto: "tcp", src: h.Addr, fromName: h.Name, inIface: h.NodeLink, local: h.Role == topology.RoleNode, node: snap.Node()}
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

var ipvsVSRE = regexp.MustCompile(`^(TCP|UDP)\s+(\S+)\s+(\S+)`)

// traceIPVS says what IPVS does with a packet the rules delivered to the
// node: the virtual server for its destination and the real servers its
// scheduler picks from. It reports whether IPVS has one.
func (l *Lab) traceIPVS(ctx context.Context, w io.Writer, pkt tracePacket) (TraceHop, bool) {
	out, err := l.net.NodeOutput(ctx, "ipvsadm", "-ln")
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
			if n := l.net.HostName(ap.Addr()); n != "" {
				name = " (" + n + ")"
			}
		}
		fmt.Fprintf(w, "  -> %s%s  %s\n", f[0], name, strings.Join(f[1:], " "))
		hop.Note += " -> " + f[0] + name
	}
	hop.Note = "real servers:" + hop.Note
	return hop, true
}

// explain says in words what the result means for the connection and for
// what the pod sees, and returns what it wrote.
func (l *Lab) explain(w io.Writer, pkt tracePacket, port *service.Port, result string, dnat netip.AddrPort, redirect uint16, masq, delivered bool) string {
	var b strings.Builder
	l.explainTo(&b, pkt, port, result, dnat, redirect, masq, delivered)
	_, _ = io.WriteString(w, b.String())
	return strings.TrimSpace(b.String())
}

func (l *Lab) explainTo(w io.Writer, pkt tracePacket, port *service.Port, result string, dnat netip.AddrPort, redirect uint16, masq, delivered bool) {
	node := l.cfg.Plan.Node.Addr
	fmt.Fprintln(w)
	switch {
	case redirect != 0:
		text := fmt.Sprintf("REDIRECT: the kernel rewrites the destination to port %d of the node, where svcproxy's userspace proxy listens", redirect)
		if port != nil {
			text += " for " + port.Name.String()
		}
		text += fmt.Sprintf(". The connection ends in svcproxy, which opens a second connection of its own, from %s, to one endpoint (round-robin", l.net.WithName(node))
		if port != nil && port.Service.Affinity.ClientIP {
			text += "; ClientIP affinity keeps a client on the endpoint it got first"
		}
		para(w, text+"):")
		if port != nil {
			// The proxier's choice for ClusterIP traffic (service.Port.Categorize).
			eps := port.Categorize(l.cfg.Plan.Node.Name, pkt.node)
			pick := eps.Cluster
			if port.Service.InternalPolicyLocal {
				pick = eps.Local
			}
			for _, ep := range pick {
				fmt.Fprintf(w, "  %s%s\n", ep.Addr, withNameSuffix(l, ep.Addr.Addr()))
			}
		}
		para(w, fmt.Sprintf("The pod sees the node (%s) as its client. svclab conntrack shows the two connections.", node))
	case dnat.IsValid() && masq:
		para(w, fmt.Sprintf("DNAT to %s, then MASQUERADE: the node rewrites the source to its own address as the packet leaves, so the pod sees %s and replies to the node, which undoes both rewrites (conntrack). %s",
			dnat.String()+withNameSuffix(l, dnat.Addr()), l.net.WithName(node), masqReason(pkt, dnat, port)))
	case dnat.IsValid():
		para(w, fmt.Sprintf("DNAT to %s: the kernel rewrites the destination, and conntrack remembers it for every later packet of the connection, both ways. The source is kept: the pod sees %s.",
			dnat.String()+withNameSuffix(l, dnat.Addr()), l.net.WithName(pkt.src)))
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

func withNameSuffix(l *Lab, a netip.Addr) string {
	if n := l.net.HostName(a); n != "" {
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
