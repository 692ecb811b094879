package hybrid

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	offloadiptables "github.com/svcproxy/svcproxy/offload/iptables"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

var (
	nodeIP = netip.MustParseAddr("198.19.0.1")
	podIP  = netip.MustParseAddr("198.19.1.50")
	webVIP = netip.MustParseAddrPort("198.18.0.10:80")
)

// webSnapshot is default/web:http, ClusterIP 198.18.0.10:80, one endpoint.
func webSnapshot() *service.Snapshot {
	s := &service.Service{
		NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"},
		Type:           service.TypeClusterIP,
		ClusterIPs:     []netip.Addr{webVIP.Addr()},
	}
	p := &service.Port{
		Name:      service.PortName{NamespacedName: s.NamespacedName, Port: "http", Protocol: service.TCP},
		Service:   s,
		Port:      webVIP.Port(),
		Protocol:  service.TCP,
		Endpoints: []service.Endpoint{{Addr: netip.MustParseAddrPort("198.19.1.10:8080"), Ready: true, Serving: true}},
	}
	s.Ports = []*service.Port{p}
	return service.NewSnapshot([]*service.Service{s}, nil)
}

// state is what the kernel does with a pod's new connection to web's VIP
// after one change of the rules: which of the two paths are installed, and
// where the packet goes (the kernel path's hooks come first).
type state struct {
	portal, kernel bool
	result         string
}

func (s state) String() string {
	return fmt.Sprintf("portal=%v kernel=%v -> %s", s.portal, s.kernel, s.result)
}

// recorder is the iptables Fake both paths share; after every change it
// traces a packet to web's VIP and records the state.
type recorder struct {
	*kiptables.Fake
	mu     sync.Mutex
	states []state
}

func (r *recorder) Restore(ctx context.Context, rules []byte) error {
	if err := r.Fake.Restore(ctx, rules); err != nil {
		return err
	}
	r.record()
	return nil
}

func (r *recorder) EnsureRule(ctx context.Context, pos kiptables.Position, t kiptables.Table, chain string, args ...string) (bool, error) {
	existed, err := r.Fake.EnsureRule(ctx, pos, t, chain, args...)
	if err == nil && !existed {
		r.record()
	}
	return existed, err
}

func (r *recorder) record() {
	dump := r.Dump()
	tr, err := r.Trace(kiptables.Packet{Src: podIP, Dst: webVIP, InIface: "eth0"})
	result := tr.Result()
	if err != nil {
		result = "error: " + err.Error()
	}
	s := state{
		portal: strings.Contains(dump, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32"),
		kernel: strings.Contains(dump, "-A SVCP-SERVICES -d 198.18.0.10/32 -p tcp"),
		result: result,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.states); n == 0 || r.states[n-1] != s {
		r.states = append(r.states, s)
	}
}

// take returns the states recorded since the last take, starting with the
// state the last take ended in.
func (r *recorder) take() []state {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.states
	if n := len(out); n > 0 {
		r.states = []state{out[n-1]}
	}
	return out
}

// newTestMode builds hybrid mode over rec (the recorder, or what wraps it),
// with the iptables path.
func newTestMode(t *testing.T, rec kiptables.Interface, clock *fakeClock) *Dataplane {
	t.Helper()
	m, err := New(Config{
		Userspace: userspace.Config{BindAddress: netip.MustParseAddr("127.0.0.1"), IPTables: rec},
		Kernel: func(carried func(service.PortName) bool) (dataplane.KernelPath, error) {
			return offloadiptables.New(offloadiptables.Config{
				Node:             dataplane.Node{NodeName: "node-a", ClusterCIDR: netip.MustParsePrefix("198.19.1.0/24")},
				Carries:          carried,
				IPTables:         rec,
				CountConnections: true,
			})
		},
		Promoter:    PromoterConfig{PromoteConnRate: 1, PromoteAfter: time.Second, DemoteAfter: time.Second, Clock: clock},
		SampleEvery: time.Hour, // the test steps by hand
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.us.Shutdown(ctx)
	})
	return m
}

// connect opens n connections to web's userspace listener: what a portal
// would bring there. The endpoint does not exist; the count is of accepted
// connections.
func connect(t *testing.T, m *Dataplane, n int) {
	t.Helper()
	var port uint16
	for _, p := range m.us.Status().Ports {
		if p.Name == "default/web:http" {
			port = p.Listener
		}
	}
	if port == 0 {
		t.Fatalf("no listener for web: %+v", m.us.Status())
	}
	for range n {
		c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	waitOpened(t, m, uint64(n))
}

// waitOpened waits until the userspace side has counted n connections of web.
func waitOpened(t *testing.T, m *Dataplane, n uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for name, c := range m.us.Stats() {
			if name.String() == "default/web:http" && c.ConnectionsOpened >= n {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("web: %d connections not counted after 30s", n)
}

// wantStates checks the sequence of states one operation went through: the
// VIP was caught at every step, and the paths changed in the order given.
func wantStates(t *testing.T, what string, got []state, want ...[2]bool) {
	t.Helper()
	for i, s := range got {
		t.Logf("%s, step %d: portal %-5v kernel path %-5v a new connection from a pod: %s", what, i, s.portal, s.kernel, s.result)
	}
	for _, s := range got {
		// REDIRECT: a portal; DNAT: a rule-writing kernel path; SOCKET: the
		// socket LB rewrote the connect() (socklb_test.go).
		if !strings.HasPrefix(s.result, "REDIRECT") && !strings.HasPrefix(s.result, "DNAT") && !strings.HasPrefix(s.result, "SOCKET") {
			t.Errorf("%s: a new connection to the VIP was caught by neither path: %s", what, s)
		}
	}
	var paths [][2]bool
	for _, s := range got {
		if p := [2]bool{s.portal, s.kernel}; len(paths) == 0 || paths[len(paths)-1] != p {
			paths = append(paths, p)
		}
	}
	if fmt.Sprint(paths) != fmt.Sprint(want) {
		t.Errorf("%s: [portal kernel] went %v, want %v\nstates: %v", what, paths, want, got)
	}
}

// The three ordering invariants, on the Fakes: startup installs the portals
// before the kernel path lets go of what an earlier process promoted; a
// promotion installs the kernel path before the portal goes; a demotion adds
// the portal before the kernel path goes. At no step is a new connection to
// the VIP caught by neither.
func TestOrdering(t *testing.T) {
	rec := &recorder{Fake: kiptables.NewFake()}
	rec.SetLocalAddrs(nodeIP)
	ctx := context.Background()
	snap := webSnapshot()

	// An earlier process had promoted web: its kernel rules are there, its
	// portals are gone (they go at shutdown).
	old, err := offloadiptables.New(offloadiptables.Config{Node: dataplane.Node{NodeName: "node-a"}, IPTables: rec})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Sync(ctx, snap); err != nil {
		t.Fatal(err)
	}
	rec.take()

	clock := &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	m := newTestMode(t, rec, clock)
	if err := m.Sync(ctx, snap); err != nil {
		t.Fatal(err)
	}
	wantStates(t, "startup", rec.take(), [2]bool{false, true}, [2]bool{true, true}, [2]bool{true, false})

	m.Step(ctx) // the baseline sample
	connect(t, m, 5)
	clock.now = clock.now.Add(time.Second)
	m.Step(ctx) // 5/s for 1s: hot
	if p := m.promoter.Path(snap.Ports()[0].Name); p != Kernel {
		t.Fatalf("after 5 connections in 1s: path %s, want kernel", p)
	}
	wantStates(t, "promote", rec.take(), [2]bool{true, false}, [2]bool{true, true}, [2]bool{false, true})

	for range 3 { // no kernel traffic: quiet for DemoteAfter
		clock.now = clock.now.Add(time.Second)
		m.Step(ctx)
	}
	if p := m.promoter.Path(snap.Ports()[0].Name); p != Userspace {
		t.Fatalf("after 3 quiet seconds: path %s, want userspace", p)
	}
	wantStates(t, "demote", rec.take(), [2]bool{false, true}, [2]bool{true, true}, [2]bool{true, false})
}

func TestSampleEvery(t *testing.T) {
	tests := []struct {
		promote, demote time.Duration
		want            time.Duration
	}{
		{5 * time.Second, 5 * time.Minute, time.Second}, // the flags' defaults
		{time.Second, 2 * time.Second, 500 * time.Millisecond},
		{0, 0, time.Second},
		{10 * time.Millisecond, 0, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := SampleEvery(PromoterConfig{PromoteAfter: tt.promote, DemoteAfter: tt.demote}); got != tt.want {
			t.Errorf("SampleEvery(promote %s, demote %s) = %s, want %s", tt.promote, tt.demote, got, tt.want)
		}
	}
}
