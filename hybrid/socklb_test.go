package hybrid

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	offloadnftables "github.com/svcproxy/svcproxy/offload/nftables"
	"github.com/svcproxy/svcproxy/offload/socklb"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"

	"sigs.k8s.io/knftables"
)

// socketLBRecorder is hybrid over --offload socklb on Fakes: the portals in
// an iptables Fake, the socket LB's maps in a socklb Fake (which counts
// translations, as a socklb.Counter), nftables beside in a nftables Fake.
// After every change of the portals or the maps it follows a pod's new
// connection to web's VIP: the connect hook first, then, if it left the
// socket alone, its first packet through the portals.
type socketLBRecorder struct {
	ipt *portalRecorder
	lb  *countingLB

	mu     sync.Mutex
	states []state
}

type portalRecorder struct {
	*kiptables.Fake
	changed func()
}

func (r *portalRecorder) Restore(ctx context.Context, rules []byte) error {
	if err := r.Fake.Restore(ctx, rules); err != nil {
		return err
	}
	r.changed()
	return nil
}

func (r *portalRecorder) EnsureRule(ctx context.Context, pos kiptables.Position, t kiptables.Table, chain string, args ...string) (bool, error) {
	existed, err := r.Fake.EnsureRule(ctx, pos, t, chain, args...)
	if err == nil && !existed {
		r.changed()
	}
	return existed, err
}

// countingLB is the socklb Fake, which counts what its Connect translates
// (a socklb.Counter, as the kernel's programs count), telling the recorder
// of every change of its maps.
type countingLB struct {
	*ksocklb.Fake
	changed func()
}

func (l *countingLB) SetService(ctx context.Context, svc ksocklb.Service, e ksocklb.Entry) error {
	if err := l.Fake.SetService(ctx, svc, e); err != nil {
		return err
	}
	l.changed()
	return nil
}

func (l *countingLB) DeleteService(ctx context.Context, svc ksocklb.Service) error {
	if err := l.Fake.DeleteService(ctx, svc); err != nil {
		return err
	}
	l.changed()
	return nil
}

var _ socklb.Counter = (*countingLB)(nil)

// countersFake is the nftables Fake with knftables' Fake.ListCounters
// mended: it makes its slice with a length and appends after it, so the
// answer starts with a nil per counter (sigs.k8s.io/knftables fake.go).
type countersFake struct{ *knft.Fake }

func (f countersFake) ListCounters(ctx context.Context) ([]*knftables.Counter, error) {
	all, err := f.Fake.ListCounters(ctx)
	var out []*knftables.Counter
	for _, c := range all {
		if c != nil {
			out = append(out, c)
		}
	}
	return out, err
}

func newSocketLBRecorder() *socketLBRecorder {
	r := &socketLBRecorder{}
	r.ipt = &portalRecorder{Fake: kiptables.NewFake(), changed: r.record}
	r.ipt.SetLocalAddrs(nodeIP)
	r.lb = &countingLB{Fake: ksocklb.NewFake(), changed: r.record}
	return r
}

// record notes the state: is web's portal there, is its element in the maps,
// and where does a pod's new connection to the VIP go.
func (r *socketLBRecorder) record() {
	svcs, _ := r.lb.Services(context.Background())
	_, element := svcs[ksocklb.Service{VIP: webVIP.Addr(), Port: webVIP.Port(), Protocol: ksocklb.TCP}]
	s := state{portal: strings.Contains(r.ipt.Dump(), "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32"), kernel: element}
	if got, tr := r.lb.Connect(ksocklb.Client{NetnsCookie: 1}, ksocklb.TCP, webVIP); tr.Translated() {
		s.result = "SOCKET " + got.String()
	} else if tr, err := r.ipt.Trace(kiptables.Packet{Src: podIP, Dst: webVIP, InIface: "eth0"}); err != nil {
		s.result = "error: " + err.Error()
	} else {
		s.result = tr.Result()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.states); n == 0 || r.states[n-1] != s {
		r.states = append(r.states, s)
	}
}

func (r *socketLBRecorder) take() []state {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.states
	if n := len(out); n > 0 {
		r.states = []state{out[n-1]}
	}
	return out
}

// TestOrderingSocketLB: the ordering invariants of TestOrdering with the
// socket LB as the kernel path. A promotion puts web's element in the maps
// (a pod's connect() is rewritten from then on) before its portal goes; a
// demotion adds the portal back before the element goes. At no step does a
// pod's new connection to the VIP miss both: it is rewritten at connect(),
// or REDIRECTed to userspace. The hook's counter gives the promoted port's
// rate; when it stays at zero for DemoteAfter, the port is demoted.
func TestOrderingSocketLB(t *testing.T) {
	rec := newSocketLBRecorder()
	ctx := context.Background()
	snap := webSnapshot()
	clock := &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, err := New(Config{
		Userspace: userspace.Config{BindAddress: netip.MustParseAddr("127.0.0.1"), IPTables: rec.ipt},
		Kernel: func(carried func(service.PortName) bool) (dataplane.KernelPath, error) {
			beside, err := offloadnftables.New(offloadnftables.Config{Node: dataplane.Node{NodeName: "node-a", ClusterCIDR: netip.MustParsePrefix("198.19.1.0/24")},
				Carries: carried, CountConnections: true, NFT: countersFake{knft.NewFake(offloadnftables.Table)}})
			if err != nil {
				return nil, err
			}
			return socklb.New(socklb.Config{LB: rec.lb, Node: dataplane.Node{NodeName: "node-a"}, Carries: carried, Beside: beside})
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
	if err := m.Sync(ctx, snap); err != nil {
		t.Fatal(err)
	}
	// At startup (nothing served before) the portal is all there is.
	if got := rec.take(); len(got) == 0 || got[len(got)-1].kernel || !got[len(got)-1].portal {
		t.Fatalf("after the first sync: %v, want web's portal and no element", got)
	}

	m.Step(ctx) // the baseline sample
	connect(t, m, 5)
	clock.now = clock.now.Add(time.Second)
	m.Step(ctx) // 5/s for 1s: hot
	if p := m.promoter.Path(snap.Ports()[0].Name); p != Kernel {
		t.Fatalf("after 5 connections in 1s: path %s, want kernel", p)
	}
	wantStates(t, "promote", rec.take(), [2]bool{true, false}, [2]bool{true, true}, [2]bool{false, true})

	// Traffic through the hook keeps the port promoted: 5 translations a
	// second, counted by the socket LB.
	for i := range 3 {
		for j := range 5 {
			rec.lb.Connect(ksocklb.Client{SocketCookie: uint64(10*i + j)}, ksocklb.TCP, webVIP)
		}
		clock.now = clock.now.Add(time.Second)
		m.Step(ctx)
	}
	if p := m.promoter.Path(snap.Ports()[0].Name); p != Kernel {
		t.Fatalf("after 3 busy seconds through the hook: path %s, want kernel", p)
	}

	for range 3 { // no translations: quiet for DemoteAfter
		clock.now = clock.now.Add(time.Second)
		m.Step(ctx)
	}
	if p := m.promoter.Path(snap.Ports()[0].Name); p != Userspace {
		t.Fatalf("after 3 quiet seconds: path %s, want userspace", p)
	}
	wantStates(t, "demote", rec.take(), [2]bool{false, true}, [2]bool{true, true}, [2]bool{true, false})
}
