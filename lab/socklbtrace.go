package lab

import (
	"context"
	"fmt"
	"io"
	"strings"

	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
)

// traceSocketLB is `svclab trace` in socklb mode, before any rule: a
// process of a host in the lab's cgroup2 subtree (a pod, the client) meets
// the socket LB's connect4 or connect6 program when it calls connect(),
// before its first packet exists. The program is walked by kernel/socklb's
// Fake over the maps svcproxy holds (socketLBMaps). When it rewrites the
// destination, the trace ends there: the socket is connected to the pod,
// and its packets carry the pod's address, which no rule of the node
// rewrites (done is true). When it leaves connect() alone (no Service, no
// endpoint), or the host is outside the subtree, the trace goes on through
// the node's rules, which the caller walks.
func (l *Lab) traceSocketLB(ctx context.Context, w io.Writer, pkt tracePacket, opts TraceOptions, rep *TraceReport) (done bool, err error) {
	h, _ := l.host(opts.From)
	subtree, _ := l.CgroupSubtree()
	if pkt.local || !inSubtree(h) {
		para(w, fmt.Sprintf("%s's processes are not in the lab's cgroup2 subtree (%s), where the socket LB is attached: no socket hook runs for them, and their packets meet the node's rules, the nftables path beside the socket LB.", h.Name, subtree))
		fmt.Fprintln(w)
		return false, nil
	}
	ports, ok, err := l.socketLBMaps(ctx)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, fmt.Errorf("svcproxy /status: no socket-LB maps in socklb mode")
	}
	f, err := socketLBFake(ctx, ports)
	if err != nil {
		return false, err
	}
	proto := ksocklb.TCP
	if pkt.proto == "udp" {
		proto = ksocklb.UDP
	}
	client := ksocklb.Client{NetnsCookie: netnsCookie(l.cfg.Plan.Namespace(h.Name)), SocketCookie: 1, Random: uint32(opts.Pick)}
	para(w, fmt.Sprintf("%s's processes run in %s, below the lab's cgroup2 subtree where the socket LB is attached: connect() runs its program before any packet is sent. The program, over the maps svcproxy wrote (socket cookie 1 stands for the new socket; random %d stands for bpf_get_prandom_u32, --pick N picks slot N):", h.Name, subtree+"/"+podCgroups+"/"+h.Name, opts.Pick))
	fmt.Fprintln(w)
	to, tr := f.Connect(client, proto, pkt.dst)
	for _, st := range tr.Steps {
		rep.Hops = append(rep.Hops, TraceHop{Tracer: "socklb", Table: "cgroup " + tr.Hook, Chain: st.Map, Rule: st.Key, Note: st.Note})
	}
	fmt.Fprintf(w, "socket LB (cgroup %s):\n%s", tr.Hook, tr)
	if !tr.Translated() {
		fmt.Fprintln(w)
		para(w, "The program left connect() alone: the first packet goes to "+pkt.dst.String()+" and meets the node's rules, the nftables path beside the socket LB.")
		fmt.Fprintln(w)
		return false, nil
	}
	var ways []wayResult
	if n := backendsOf(ports, pkt); n > 0 {
		for slot := range n {
			b, _ := f.Connect(ksocklb.Client{NetnsCookie: client.NetnsCookie, SocketCookie: 2 + uint64(slot), Random: uint32(slot)}, proto, pkt.dst)
			ways = append(ways, wayResult{result: "connect to " + b.String(), dnat: b, p: 1 / float64(n)})
		}
	}
	rep.Ways = l.writeWays(w, ways)
	rep.Result = fmt.Sprintf("The socket is connected to %s%s itself: every packet, the first on, carries the pod's address, so no rule of the node rewrites it and conntrack records no NAT; the pod sees %s, and getpeername() in %s still says %s (getpeername%s).",
		to, withNameSuffix(l, to.Addr()), l.withName(pkt.src), h.Name, pkt.dst, strings.TrimPrefix(tr.Hook, "connect"))
	fmt.Fprintln(w)
	para(w, rep.Result)
	return true, nil
}

// backendsOf is how many backends the maps hold for pkt's destination.
func backendsOf(ports []socketLBPort, pkt tracePacket) int {
	for _, p := range ports {
		if !strings.EqualFold(p.Protocol, pkt.proto) {
			continue
		}
		for _, fe := range p.Frontends {
			if fe == pkt.dst.String() {
				return len(p.Backends)
			}
		}
	}
	return 0
}
