package views

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// traceSocketLB is `svclab trace` in socklb mode, before any rule: a
// process of a host below the cgroup where the socket LB is attached (on
// the one-node lab, a pod or the client, in the lab's cgroup2 subtree)
// meets the socket LB's connect4 or connect6 program when it calls
// connect(), before its first packet exists. The program is walked by
// kernel/socklb's Fake loaded with the kernel's maps (socketLBDump). When
// it rewrites the destination, the trace ends there: the socket is
// connected to the pod, and its packets carry the pod's address, which no
// rule of the node rewrites (done is true). When it leaves connect() alone
// (no Service, no endpoint), or the host is not below that cgroup, the
// trace goes on through the node's rules, which the caller walks; on the
// kubeadm cluster, where no lab host is (the node's pods are containers),
// what a pod of the node would meet is walked first (podConnect).
func (v *Views) traceSocketLB(ctx context.Context, w io.Writer, pkt tracePacket, opts TraceOptions, rep *TraceReport) (done bool, err error) {
	h, _ := v.net.Host(opts.From)
	s, err := v.socketLB()
	if err != nil {
		return false, err
	}
	if pkt.local || !v.sees(s, h) {
		para(w, fmt.Sprintf("%s's processes are not in %s (%s), where the socket LB is attached: no socket hook runs for them, and their packets meet the node's rules, the nftables path beside the socket LB.", h.Name, s.CgroupIs, s.Cgroup))
		fmt.Fprintln(w)
		if s.Pods == "" {
			return false, nil
		}
		return false, v.podConnect(ctx, w, pkt, opts, s)
	}
	dump, err := v.socketLBDump(ctx, s)
	if err != nil {
		return false, err
	}
	f := ksocklb.NewFake()
	if err := f.Load(dump); err != nil {
		return false, err
	}
	proto := ksocklb.TCP
	if pkt.proto == "udp" {
		proto = ksocklb.UDP
	}
	// The kernel's clock and the client's namespace, so that an affinity
	// entry the client's earlier connections left is found and aged as the
	// program would; socket cookie 0 stands for the new socket (the kernel
	// numbers sockets from 1).
	client := ksocklb.Client{NetnsCookie: topology.NetnsCookie(v.net.Plan().Namespace(h.Name)), Random: uint32(opts.Pick), Now: dump.Now}
	para(w, fmt.Sprintf("%s's processes run in %s, below %s where the socket LB is attached: connect() runs its program before any packet is sent. The program, over the maps as the kernel holds them now (%s; socket cookie 0 stands for the new socket, random %d for bpf_get_prandom_u32: --pick N picks slot N):", h.Name, v.hostCgroup(h), s.CgroupIs, s.pins(), opts.Pick))
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
	// Every way: slot by slot, each on a Fake of its own (the walk above
	// wrote an affinity entry), the same backend's ways summed: with a
	// fresh affinity entry, every random number leads to it.
	var ways []wayResult
	if n := backendsOf(dump, pkt); n > 0 {
		for slot := range n {
			fw := ksocklb.NewFake()
			if err := fw.Load(dump); err != nil {
				return false, err
			}
			b, _ := fw.Connect(ksocklb.Client{NetnsCookie: client.NetnsCookie, Random: uint32(slot), Now: dump.Now}, proto, pkt.dst)
			if i := slices.IndexFunc(ways, func(w wayResult) bool { return w.dnat == b }); i >= 0 {
				ways[i].p += 1 / float64(n)
				continue
			}
			ways = append(ways, wayResult{result: "connect to " + b.String(), dnat: b, p: 1 / float64(n)})
		}
	}
	rep.Ways = v.writeWays(w, ways)
	if len(ways) > 1 {
		rep.Choice = "random slot: the program picks a backend with bpf_get_prandom_u32"
	}
	in := v.pathInput(pkt, walk{})
	in.socket, in.socketBy = to, "the socket LB's cgroup "+tr.Hook+" program"
	rep.Path = buildPath(in)
	rep.Result = fmt.Sprintf("The socket is connected to %s%s itself: every packet, the first on, carries the pod's address, so no rule of the node rewrites it and conntrack records no NAT; the pod sees %s, and getpeername() in %s still says %s (getpeername%s).",
		to, v.nameSuffix(to.Addr()), v.net.WithName(pkt.src), h.Name, pkt.dst, strings.TrimPrefix(tr.Hook, "connect"))
	fmt.Fprintln(w)
	para(w, rep.Result)
	return true, nil
}

// backendsOf is how many backends the maps hold for pkt's destination.
func backendsOf(d ksocklb.Dump, pkt tracePacket) int {
	for _, s := range d.Services {
		if strings.EqualFold(s.Protocol.String(), pkt.proto) && netip.AddrPortFrom(s.VIP, s.Port) == pkt.dst {
			return len(s.Backends)
		}
	}
	return 0
}

// hostCgroup is the cgroup2 directory lab host h's processes run in: its
// own in the lab's subtree (topology.Cgroups.Place), or "" for a host left
// in the machine's (the node, the outside host).
func (v *Views) hostCgroup(h topology.Host) string {
	subtree, err := v.net.Cgroups().Subtree()
	if err != nil || !topology.InSubtree(h) {
		return ""
	}
	return filepath.Join(subtree, topology.PodCgroups, h.Name)
}

// sees says whether the socket LB s sees h's processes: whether they run
// below the cgroup its programs are attached to.
func (v *Views) sees(s SocketLB, h topology.Host) bool {
	dir := v.hostCgroup(h)
	return dir != "" && s.Cgroup != "" && strings.HasPrefix(dir+"/", filepath.Clean(s.Cgroup)+"/")
}

// podConnect walks, on the kubeadm cluster, the connect() of a pod of the
// node to pkt's destination through the node's socket LB, over its maps as
// the kernel holds them now: what the traced host does not meet, but the
// node's pods do. It is text only: the report's hops stay the packet's.
func (v *Views) podConnect(ctx context.Context, w io.Writer, pkt tracePacket, opts TraceOptions, s SocketLB) error {
	dump, err := v.socketLBDump(ctx, s)
	if err != nil {
		return err
	}
	f := ksocklb.NewFake()
	if err := f.Load(dump); err != nil {
		return err
	}
	proto := ksocklb.TCP
	if pkt.proto == "udp" {
		proto = ksocklb.UDP
	}
	para(w, fmt.Sprintf("What runs there are %s: their connect() to %s meets the program, over the maps as the kernel holds them now (%s), walked here for a pod whose network namespace has no affinity entry yet (netns cookie 0; socket cookie 0 stands for the new socket, random %d for bpf_get_prandom_u32: --pick N picks slot N):", s.Pods, pkt.dst, s.pins(), opts.Pick))
	fmt.Fprintln(w)
	to, tr := f.Connect(ksocklb.Client{Random: uint32(opts.Pick), Now: dump.Now}, proto, pkt.dst)
	fmt.Fprintf(w, "socket LB (cgroup %s):\n%s\n", tr.Hook, tr)
	if tr.Translated() {
		para(w, fmt.Sprintf("Such a pod's socket is connected to %s%s itself, and no rule of the node rewrites its packets. %s's packet is not a pod's:", to, v.nameSuffix(to.Addr()), pkt.fromName))
	} else {
		para(w, fmt.Sprintf("The program leaves a pod's connect() alone too: its packets meet the node's rules, as %s's do:", pkt.fromName))
	}
	fmt.Fprintln(w)
	return nil
}
