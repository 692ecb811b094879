package views

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// labMaps is what the socket LB's maps hold after a few connects in the
// lab: web over three pods, web-sticky with ClientIP affinity (one entry,
// the client's), a Service without endpoints, and web-dual's IPv6 side.
func labMaps(t *testing.T) ksocklb.Dump {
	t.Helper()
	ctx := context.Background()
	f := ksocklb.NewFake()
	ap := netip.MustParseAddrPort
	set := func(vip string, port uint16, e ksocklb.Entry) {
		require.NoError(t, f.SetService(ctx, ksocklb.Service{VIP: netip.MustParseAddr(vip), Port: port, Protocol: ksocklb.TCP}, e))
	}
	set("198.18.0.20", 80, ksocklb.Entry{Backends: []netip.AddrPort{ap("198.19.1.10:8080"), ap("198.19.1.11:8080"), ap("198.19.1.12:8080")}})
	set("198.18.0.21", 80, ksocklb.Entry{Backends: []netip.AddrPort{ap("198.19.1.10:8080"), ap("198.19.1.11:8080")}, AffinityTimeout: 3 * time.Hour})
	set("198.18.0.22", 80, ksocklb.Entry{})
	set("2001:db8:18::24", 80, ksocklb.Entry{Backends: []netip.AddrPort{ap("[2001:db8:19::1:10]:8080")}})
	f.Connect(ksocklb.Client{NetnsCookie: 4096, SocketCookie: 7, Random: 1, Now: time.Minute}, ksocklb.TCP, ap("198.18.0.21:80"))
	f.Connect(ksocklb.Client{NetnsCookie: 4096, SocketCookie: 8, Random: 2}, ksocklb.TCP, ap("198.18.0.20:80"))
	d, err := f.Dump(ctx)
	require.NoError(t, err)
	d.Now = 3 * time.Minute
	return d
}

// formatSocketLB lists each services element with its slots, the pods
// named, what a Service without a backend does, the affinity entries with
// their namespace named and their age, and the reverse entries.
func TestFormatSocketLB(t *testing.T) {
	net := topology.New(topology.Config{StateDir: "/run/svclab"})
	v := New(Config{Net: net})
	got := v.formatSocketLB(LabSocketLB(net), labMaps(t), map[uint64]string{4096: "client"})
	want := `# its maps, pinned in /run/svclab-bpf/svcproxy
services: (VIP, port, protocol) -> id, backends by slot
  198.18.0.20:80/TCP  id 1
    slot 0 -> 198.19.1.10:8080 (web-0)
    slot 1 -> 198.19.1.11:8080 (web-1)
    slot 2 -> 198.19.1.12:8080 (web-2)
  198.18.0.21:80/TCP  id 2, ClientIP affinity 3h0m0s
    slot 0 -> 198.19.1.10:8080 (web-0)
    slot 1 -> 198.19.1.11:8080 (web-1)
  198.18.0.22:80/TCP  id 3
    count 0: connect() left alone, the nftables path beside rejects it
  [2001:db8:18::24]:80/TCP  id 4
    slot 0 -> [2001:db8:19::1:10]:8080 (web-0)
affinity: (netns cookie, id) -> the backend that namespace reached last
  (4096 (client), 2) -> slot 1, 198.19.1.11:8080 (web-1), used 2m0s ago
revnat: (socket cookie, backend) -> the Service the socket asked for; 2 entries
  (7, 198.19.1.11:8080) -> 198.18.0.21:80
  (8, 198.19.1.12:8080) -> 198.18.0.20:80
`
	require.Contains(t, got, want)
}

// onlyService keeps one Service's elements, its affinity entries and the
// reverse entries of sockets that asked for it.
func TestOnlyService(t *testing.T) {
	snap := loadManifests(t)
	svc, err := FindService(snap, "web")
	require.NoError(t, err)
	d := onlyService(labMaps(t), svc)
	require.Len(t, d.Services, 1)
	require.Equal(t, "198.18.0.20:80/TCP", d.Services[0].Service.String())
	require.Empty(t, d.Affinity)
	require.Len(t, d.RevNAT, 1)
	require.Equal(t, netip.MustParseAddrPort("198.19.1.12:8080"), d.RevNAT[0].Backend)
}

// fakeMaps are a socket LB's maps as a test gives them: a Dump, read by
// kernel/socklb's Fake; Close counts.
type fakeMaps struct {
	*ksocklb.Fake
	closed *int
}

func (m fakeMaps) Close() error { *m.closed++; return nil }

// TestSocketLBOnANode: `svclab rules --node worker1` and `svclab trace
// --node worker1` on the kubeadm cluster in socklb mode read worker1's
// socket LB where the lab says it is (Config.SocketLB: the node's own
// bpffs, in its mount namespace, and its kubelet's cgroup root), not the
// one-node lab's bpffs. The rules list its maps under where they are; the
// trace from worker1 says no socket hook sees the node's own processes,
// walks a pod's connect() over the node's maps, and leaves the packet's
// hops to the node's rules. Every opened map is closed.
func TestSocketLBOnANode(t *testing.T) {
	ctx := context.Background()
	p := topology.DefaultPlan()
	worker1 := topology.Host{Name: "worker1", Role: topology.RoleNode, Addr: netip.MustParseAddr("198.19.0.2")}
	on := *p
	on.Node, on.Gateway, on.Uplink = worker1, p.Node, "eth0"
	net := topology.New(topology.Config{Plan: &on, StateDir: t.TempDir()})
	require.NoError(t, net.RecordHost(worker1))
	require.NoError(t, net.WriteState(topology.State{Mode: "socklb", Nodes: 3}))
	opened, closed := 0, 0
	at := SocketLB{
		Cgroup:   "/run/svclab-cgroup2/svclab/worker1",
		CgroupIs: "worker1's kubelet's cgroup root",
		PinPath:  "/sys/fs/bpf/svcproxy",
		Where:    "worker1's own bpffs, in its mount namespace",
		Pods:     "worker1's pods",
		Open: func() (SocketLBMaps, error) {
			f := ksocklb.NewFake()
			if err := f.Load(labMaps(t)); err != nil {
				return nil, err
			}
			opened++
			return fakeMaps{f, &closed}, nil
		},
	}
	v := New(Config{Net: net, SocketLB: func() (SocketLB, error) { return at, nil }})
	snap := loadManifests(t)
	web, err := FindService(snap, "web")
	require.NoError(t, err)

	var b strings.Builder
	require.NoError(t, v.socketLBRules(ctx, &b, web, false))
	require.Equal(t, `
# socket LB: connect4/6, sendmsg4/6, recvmsg4/6, getpeername4/6 attached at /run/svclab-cgroup2/svclab/worker1;
# its maps, pinned in /sys/fs/bpf/svcproxy (worker1's own bpffs, in its mount namespace)
services: (VIP, port, protocol) -> id, backends by slot
  198.18.0.20:80/TCP  id 1
    slot 0 -> 198.19.1.10:8080 (web-0)
    slot 1 -> 198.19.1.11:8080 (web-1)
    slot 2 -> 198.19.1.12:8080 (web-2)
affinity: (netns cookie, id) -> the backend that namespace reached last
  (none)
revnat: (socket cookie, backend) -> the Service the socket asked for; 1 entries
  (8, 198.19.1.12:8080) -> 198.18.0.20:80
`, b.String())

	opts := TraceOptions{From: "worker1", Target: "web", Pick: 1}
	pkt, _, err := v.tracePacket(snap, opts)
	require.NoError(t, err)
	var w strings.Builder
	rep := &TraceReport{}
	done, err := v.traceSocketLB(ctx, &w, pkt, opts, rep)
	require.NoError(t, err)
	require.False(t, done, "worker1's own packet goes on to the node's rules")
	require.Empty(t, rep.Hops, "a pod's walk is not the packet's")
	got := strings.Join(strings.Fields(w.String()), " ")
	for _, want := range []string{
		"worker1's processes are not in worker1's kubelet's cgroup root (/run/svclab-cgroup2/svclab/worker1), where the socket LB is attached",
		"What runs there are worker1's pods: their connect() to 198.18.0.20:80 meets the program, over the maps as the kernel holds them now (/sys/fs/bpf/svcproxy (worker1's own bpffs, in its mount namespace))",
		"socket LB (cgroup connect4):",
		"rewritten to 198.19.1.11:8080",
		"Such a pod's socket is connected to 198.19.1.11:8080 (web-1) itself",
	} {
		require.Contains(t, got, want)
	}
	require.Equal(t, 2, opened)
	require.Equal(t, opened, closed)
}
