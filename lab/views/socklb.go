package views

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/service"
)

// What `svclab rules` and `svclab trace` show of the socket LB (--mode
// socklb): its four maps as the kernel holds them, and a connect() walked
// through the program over them by kernel/socklb's Fake, the same tracer
// its unit tests read.
//
// On the one-node lab, svcproxy pins the maps and the programs' links
// (--socklb-pin-path) in a bpffs the lab mounts on a directory of its own,
// topology.BPFFS (/run/svclab-bpf), as Cilium pins under /sys/fs/bpf: a
// restart of svcproxy adopts them, and svclab opens them read-only
// (kernel/socklb.OpenPinned) to decode them. Up mounts it, Down unmounts it
// (which drops whatever a crashed svcproxy left pinned), and `svclab mode`
// runs `svcproxy --cleanup` with the pin path, which detaches the programs
// before another mode starts. On the kubeadm cluster each node's svcproxy
// pins in the node's own bpffs, in its mount namespace, and attaches at its
// kubelet's cgroup root (lab/cluster's kubeadmsocklb.go): the lab says
// where (Config.SocketLB).

// SocketLB is where the socket LB of the node the views look at runs.
type SocketLB struct {
	// Cgroup is the cgroup2 directory its programs are attached to: a
	// process meets them when it runs below it. CgroupIs says what it is,
	// for a reader ("the lab's cgroup2 subtree").
	Cgroup, CgroupIs string
	// PinPath is where its maps are pinned (svcproxy's --socklb-pin-path),
	// and Where, when it is not the machine's mount namespace, whose it is
	// ("worker1's own bpffs, in its mount namespace").
	PinPath, Where string
	// Pods names what runs below Cgroup when no lab host does: on the
	// kubeadm cluster, the node's pods, containers that `svclab trace`
	// cannot start from ("" on the one-node lab, whose pods and client are
	// lab hosts below it).
	Pods string
	// Open opens the pinned maps read-only.
	Open func() (SocketLBMaps, error)
}

// SocketLBMaps are a socket LB's maps opened read-only: kernel/socklb's
// Pinned, or its Fake in tests.
type SocketLBMaps interface {
	Dump(ctx context.Context) (ksocklb.Dump, error)
	// Connections are the connect()s its programs rewrote, per Service.
	Connections(ctx context.Context) (map[ksocklb.Service]uint64, error)
	Close() error
}

// LabSocketLB is where the one-node lab's svcproxy runs the socket LB: at
// the lab's cgroup2 subtree, pinned in the lab's bpffs. Cgroup is "" while
// the lab is not up.
func LabSocketLB(net *topology.Net) SocketLB {
	subtree, _ := net.Cgroups().Subtree()
	pins := net.BPFFS().SocketLBPinPath()
	return SocketLB{Cgroup: subtree, CgroupIs: "the lab's cgroup2 subtree", PinPath: pins, Open: func() (SocketLBMaps, error) {
		p, err := ksocklb.OpenPinned(pins)
		if err != nil {
			return nil, err
		}
		return p, nil
	}}
}

// pins names where s's maps are pinned, for a reader.
func (s SocketLB) pins() string {
	if s.Where == "" {
		return s.PinPath
	}
	return s.PinPath + " (" + s.Where + ")"
}

// socketLB is where the node's socket LB runs (Config.SocketLB).
func (v *Views) socketLB() (SocketLB, error) {
	if v.socklb == nil {
		return LabSocketLB(v.net), nil
	}
	return v.socklb()
}

// socketLBDump reads the socket LB's maps from their pins.
func (v *Views) socketLBDump(ctx context.Context, s SocketLB) (ksocklb.Dump, error) {
	m, err := s.Open()
	if err != nil {
		return ksocklb.Dump{}, fmt.Errorf("the socket LB's maps pinned in %s: %w", s.pins(), err)
	}
	defer m.Close()
	return m.Dump(ctx)
}

// onlyService keeps what in d is svc's: its ports' elements, their affinity
// entries, and the reverse entries of sockets that connected to them.
func onlyService(d ksocklb.Dump, svc *service.Service) ksocklb.Dump {
	out := ksocklb.Dump{Now: d.Now}
	ids := map[uint32]bool{}
	addrs := map[netip.AddrPort]bool{}
	for _, s := range d.Services {
		if !slices.Contains(svc.ClusterIPs, s.VIP) {
			continue
		}
		out.Services = append(out.Services, s)
		ids[s.ID] = true
		addrs[netip.AddrPortFrom(s.VIP, s.Port)] = true
	}
	for _, a := range d.Affinity {
		if ids[a.ServiceID] {
			out.Affinity = append(out.Affinity, a)
		}
	}
	for _, r := range d.RevNAT {
		if addrs[r.Service] {
			out.RevNAT = append(out.RevNAT, r)
		}
	}
	return out
}

// maxRevNAT is how many reverse entries `svclab rules` lists: one is left
// per translated socket until the LRU map evicts it, so they pile up.
const maxRevNAT = 6

// formatSocketLB writes the maps as `svclab rules` shows them: each
// services element with its backends by slot, the pods named; the
// affinity entries, their network namespace named and their age; and the
// newest few reverse entries.
func (v *Views) formatSocketLB(s SocketLB, d ksocklb.Dump, cookies map[uint64]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n# socket LB: connect4/6, sendmsg4/6, recvmsg4/6, getpeername4/6 attached at %s;\n", s.Cgroup)
	fmt.Fprintf(&b, "# its maps, pinned in %s\n", s.pins())
	b.WriteString("services: (VIP, port, protocol) -> id, backends by slot\n")
	if len(d.Services) == 0 {
		b.WriteString("  (none)\n")
	}
	for _, s := range d.Services {
		fmt.Fprintf(&b, "  %s  id %d", s.Service, s.ID)
		if s.AffinityTimeout > 0 {
			fmt.Fprintf(&b, ", ClientIP affinity %s", s.AffinityTimeout)
		}
		b.WriteString("\n")
		if len(s.Backends) == 0 {
			b.WriteString("    count 0: connect() left alone, the nftables path beside rejects it\n")
		}
		for slot, be := range s.Backends {
			fmt.Fprintf(&b, "    slot %d -> %s%s\n", slot, be, v.nameSuffix(be.Addr()))
		}
	}
	b.WriteString("affinity: (netns cookie, id) -> the backend that namespace reached last\n")
	if len(d.Affinity) == 0 {
		b.WriteString("  (none)\n")
	}
	for _, a := range d.Affinity {
		who := ""
		if name, ok := cookies[a.NetnsCookie]; ok {
			who = " (" + name + ")"
		}
		fmt.Fprintf(&b, "  (%d%s, %d) -> slot %d, %s%s", a.NetnsCookie, who, a.ServiceID, a.Slot, a.Backend, v.nameSuffix(a.Backend.Addr()))
		if d.Now > 0 {
			fmt.Fprintf(&b, ", used %s ago", (d.Now - a.LastUsed).Truncate(time.Second))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "revnat: (socket cookie, backend) -> the Service the socket asked for; %d entries\n", len(d.RevNAT))
	revnat := d.RevNAT
	if len(revnat) > maxRevNAT {
		// The newest sockets have the highest cookies.
		revnat = revnat[len(revnat)-maxRevNAT:]
		fmt.Fprintf(&b, "  ... (the %d newest:)\n", maxRevNAT)
	}
	for _, r := range revnat {
		fmt.Fprintf(&b, "  (%d, %s) -> %s\n", r.SocketCookie, r.Backend, r.Service)
	}
	return b.String()
}

// hostCookies names the network namespaces of the lab's hosts by their
// cookies, for the affinity map's keys.
func (v *Views) hostCookies() map[uint64]string {
	out := map[uint64]string{}
	for _, h := range v.net.Plan().Hosts {
		if c := topology.NetnsCookie(v.net.Plan().Namespace(h.Name)); c != 0 {
			out[c] = h.Name
		}
	}
	return out
}

// addSocketLBCounts adds the socket LB's counts (the connect()s its program
// rewrote, per Service) to kc under their ports' names, when its maps are
// pinned: in socklb mode, and in hybrid mode promoting to it. Without pins
// nothing is added.
func (v *Views) addSocketLBCounts(ctx context.Context, snap *service.Snapshot, kc *KernelCounters) {
	s, err := v.socketLB()
	if err != nil {
		return
	}
	p, err := s.Open()
	if err != nil {
		return // no socket LB runs
	}
	defer p.Close()
	counts, err := p.Connections(ctx)
	if err != nil {
		return
	}
	for svc, n := range counts {
		proto := service.TCP
		if svc.Protocol == ksocklb.UDP {
			proto = service.UDP
		}
		if port, ok := snap.PortByVIP(service.VIP{Protocol: proto, Addr: netip.AddrPortFrom(svc.VIP, svc.Port)}); ok {
			kc.Ports[port.Name.String()] += n
		}
	}
}
