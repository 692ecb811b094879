package views

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

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

// Trace walks one packet (the first of a new connection) from a lab host to
// a Service through the rules the node's kernel holds now: it reads them
// (iptables-save, nft list table ip svcproxy), loads them into the tracers of
// kernel/iptables and kernel/nftables, and writes which chain and rule sent
// the packet where, whether it was DNATed, REDIRECTed or masqueraded, every
// way the random choices can go, and what the pod will see.
func (v *Views) Trace(ctx context.Context, opts TraceOptions) error {
	_, err := v.TraceReport(ctx, opts)
	return err
}

// TraceReport is Trace, which it writes to Stdout too, returned as data as
// well: the hops `svclab web` draws.
func (v *Views) TraceReport(ctx context.Context, opts TraceOptions) (*TraceReport, error) {
	mode, err := v.net.Mode()
	if err != nil {
		return nil, err
	}
	snap, err := v.src.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	pkt, port, err := v.tracePacket(snap, opts)
	if err != nil {
		return nil, err
	}
	var text strings.Builder
	w := io.MultiWriter(v.stdout, &text)
	rep := &TraceReport{From: pkt.fromName, Src: pkt.src.String(), Dst: pkt.dst.String(), Proto: strings.ToUpper(pkt.proto),
		Mode: mode, InIface: pkt.inIface, Local: pkt.local, Pick: opts.Pick}
	defer func() { rep.Text = text.String() }()
	if port != nil {
		rep.Port = port.Name.String()
		fmt.Fprintf(w, "%s is %s/%s; svcproxy runs %s mode.\n", port.Name, pkt.dst, strings.ToUpper(pkt.proto), mode)
	} else {
		fmt.Fprintf(w, "%s/%s is no Service's ClusterIP; svcproxy runs %s mode.\n", pkt.dst, strings.ToUpper(pkt.proto), mode)
	}
	if mode == "socklb" {
		// The socket hook comes first, at connect() (socklbtrace.go).
		done, err := v.traceSocketLB(ctx, w, pkt, opts, rep)
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

	if err := v.walkRules(ctx, w, pkt, port, opts.Pick, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// walkRules walks pkt through the node's rules, nftables' first: svcproxy's
// nat chains run at priority -101, before iptables' nat table (-100), and a
// DNAT there is final. It writes each walk, every way the random choices
// can go, and what the pod will see, and adds them to rep.
func (v *Views) walkRules(ctx context.Context, w io.Writer, pkt tracePacket, port *service.Port, pick int, rep *TraceReport) error {
	local, err := v.nodeAddrs(ctx)
	if err != nil {
		return err
	}
	for _, load := range []func(context.Context, []netip.Addr) (ruleSet, error){v.nftablesRuleSet, v.iptablesRuleSet} {
		rs, err := load(ctx, local)
		if err != nil {
			return err
		}
		if rs == nil {
			continue // no such rules in the node
		}
		wk, err := rs.walk(pkt, pick)
		if err != nil {
			return err
		}
		rep.Hops = append(rep.Hops, wk.hops...)
		fmt.Fprintf(w, "%s:\n%s", rs.name(), wk.text)
		all, err := rs.ways(pkt)
		if err != nil {
			return err
		}
		rep.Ways, rep.Choice = v.writeWays(w, all), ""
		if len(rep.Ways) > 1 {
			rep.Choice = "random"
		}
		if !wk.final {
			fmt.Fprintf(w, "\nNo DNAT in nftables: the packet goes on to iptables' nat table.\n\n")
			continue
		}
		in := v.pathInput(pkt, wk)
		if wk.redirect == 0 && !wk.dnat.IsValid() && wk.verdict == "ACCEPT" && wk.delivered && port != nil {
			if vs, ok := v.traceIPVS(ctx, w, pkt); ok {
				rep.Hops = append(rep.Hops, vs.hop)
				rep.Result = v.ipvsResult(w, pkt, wk)
				rep.Ways, rep.Choice = vs.ways(v.nameSuffix), vs.choice()
				if rs, ok := vs.pick(pick); ok {
					in.dnat, in.dnatWhat, in.dnatBy = rs, "IPVS", vs.hop.Rule
				}
				rep.Path = buildPath(in)
				return nil
			}
		}
		if wk.redirect != 0 && port != nil {
			eps := v.userspaceEndpoints(pkt, port)
			rep.Ways, rep.Choice = v.roundRobinWays(eps, port), "round-robin"
			if len(eps) > 0 {
				in.upstream = eps[pick%len(eps)]
			}
		}
		rep.Result = v.explain(w, pkt, port, wk)
		rep.Path = buildPath(in)
		return nil
	}
	return errors.New("no rules to trace the packet through")
}

// wayResult is one way a trace can go.
type wayResult struct {
	result string
	dnat   netip.AddrPort
	p      float64
}

// writeWays lists every way the random choices can go, when there is more
// than one.
func (v *Views) writeWays(w io.Writer, ways []wayResult) []TraceWay {
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
			if n := v.net.HostName(way.dnat.Addr()); n != "" {
				r = strings.Replace(r, way.dnat.String(), way.dnat.String()+" ("+n+")", 1)
			}
		}
		fmt.Fprintf(w, "  %d  %-40s p=%.3f\n", i, r, way.p)
		out[i].Result = r
	}
	return out
}

// pathInput is what the packet's picture is drawn from: the packet, and
// what the walk's rules did to it (the rule that did each rewrite is the
// hop whose note names it).
func (v *Views) pathInput(pkt tracePacket, wk walk) pathInput {
	node := v.net.Plan().Node
	in := pathInput{proto: pkt.proto, from: pkt.fromName, src: pkt.src, dst: pkt.dst, local: pkt.local,
		node: node.Name, nodeAddr: node.Addr, name: v.net.HostName,
		dnat: wk.dnat, dnatWhat: "DNAT", masq: wk.masq, redirect: wk.redirect, verdict: wk.verdict, deliver: wk.delivered}
	if pkt.src.Is6() && node.Addr6.IsValid() {
		in.nodeAddr = node.Addr6
	}
	for _, h := range wk.hops {
		by := strings.TrimSpace(h.Tracer + " " + h.Table + " " + h.Chain)
		switch {
		case strings.Contains(h.Note, "DNAT "):
			in.dnatBy = by
		case strings.Contains(h.Note, "REDIRECT"):
			in.redirBy = by
		}
		if strings.Contains(h.Note, "MASQUERADE") {
			in.masqBy = by
		}
	}
	return in
}

// userspaceEndpoints are the endpoints svcproxy's userspace proxy picks
// from for pkt, in its order: the proxier's choice for ClusterIP traffic
// (service.Port.Categorize).
func (v *Views) userspaceEndpoints(pkt tracePacket, port *service.Port) []netip.AddrPort {
	eps := port.Categorize(v.net.Plan().Node.Name, pkt.node)
	pick := eps.Cluster
	if port.Service.InternalPolicyLocal {
		pick = eps.Local
	}
	var out []netip.AddrPort
	for _, ep := range pick {
		out = append(out, ep.Addr)
	}
	return out
}

// roundRobinWays are the userspace proxy's choices: each endpoint in turn,
// so each gets an equal share of new connections; with ClientIP affinity a
// client keeps the one it got first.
func (v *Views) roundRobinWays(eps []netip.AddrPort, port *service.Port) []TraceWay {
	var out []TraceWay
	for _, ep := range eps {
		r := "svcproxy connects to " + ep.String() + v.nameSuffix(ep.Addr())
		if port.Service.Affinity.ClientIP {
			r += " (then keeps this client there: ClientIP affinity)"
		}
		out = append(out, TraceWay{Result: r, P: 1 / float64(len(eps))})
	}
	return out
}
