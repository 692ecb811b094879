package userspace

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// TestSyncPortals follows a Service through its life in the portals: the trace of
// a packet to its ClusterIP, from a pod and from the node, after each Sync.
func TestSyncPortals(t *testing.T) {
	ipt := iptables.NewFake()
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", sayName)
	p := startProxier(t, Config{IPTables: ipt})
	vip := netip.MustParseAddrPort("198.18.0.10:80")
	pod := iptables.Packet{Src: netip.MustParseAddr("198.19.2.2"), Dst: vip, InIface: "eth0"}
	node := iptables.Packet{Src: netip.MustParseAddr("198.19.0.1"), Dst: vip, Local: true}

	steps := []struct {
		name     string
		snap     *service.Snapshot
		verdict  string
		redirect bool
	}{
		{"with an endpoint: redirected to the listener", snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())), "ACCEPT", true},
		{"without endpoints: rejected", snapshotOf(t, webSpec(service.Affinity{})), "REJECT", false},
		{"endpoint back", snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())), "ACCEPT", true},
		{"service gone: nothing of ours", snapshotOf(t), "ACCEPT", false},
	}
	for _, st := range steps {
		mustSync(t, p, st.snap)
		var want uint16
		if st.redirect {
			want = portStatus(t, p, "default/web:http").Listener
		}
		for _, pkt := range []iptables.Packet{pod, node} {
			tr, err := ipt.Trace(pkt)
			if err != nil {
				t.Fatalf("%s: trace: %v", st.name, err)
			}
			if tr.Verdict != st.verdict || tr.Redirect != want {
				t.Errorf("%s: got %s :%d, want %s :%d\n%s", st.name, tr.Verdict, tr.Redirect, st.verdict, want, tr)
			}
		}
	}
	if !p.Healthy() {
		t.Errorf("not healthy: %v", p.LastError())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil { // Run ends at once and shuts down: portals removed
		t.Fatalf("Run: %v", err)
	}
	if dump := ipt.Dump(); strings.Contains(dump, "SVCP") {
		t.Errorf("portals left after shutdown:\n%s", dump)
	}
}

// flakyIPTables fails its first failures Restores.
type flakyIPTables struct {
	*iptables.Fake
	failures atomic.Int32
}

func (f *flakyIPTables) Restore(ctx context.Context, rules []byte) error {
	if f.failures.Add(-1) >= 0 {
		return errors.New("iptables-restore: resource temporarily unavailable")
	}
	return f.Fake.Restore(ctx, rules)
}

func TestRestoreFailureIsRetried(t *testing.T) {
	ipt := &flakyIPTables{Fake: iptables.NewFake()}
	ipt.failures.Store(2)
	p := NewProxier(Config{IPTables: ipt})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	if err := p.Sync(snapshotOf(t, webSpec(service.Affinity{}))); err == nil {
		t.Fatal("Sync succeeded, want the restore error")
	}
	if p.Healthy() || p.LastError() == nil {
		t.Errorf("healthy after a failed restore")
	}
	eventually(t, "a retry succeeds", p.Healthy)
	if st := p.Status(); st.PortalsFailures != 2 || st.PortalsError != "" {
		t.Errorf("status %+v, want 2 failures and no error", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// ensureCounter counts EnsureRule calls: the hook checks.
type ensureCounter struct {
	*iptables.Fake
	ensures atomic.Int32
}

func (e *ensureCounter) EnsureRule(ctx context.Context, pos iptables.Position, t iptables.Table, chain string, args ...string) (bool, error) {
	e.ensures.Add(1)
	return e.Fake.EnsureRule(ctx, pos, t, chain, args...)
}

// The hooks are checked at the first restore and at the periodic one (which
// puts back a hook another program removed), not at every restore a change
// makes: a restore of our chains leaves them alone, and each check is an
// iptables process reading the whole table on the nf_tables backend.
func TestHooksCheckedPeriodically(t *testing.T) {
	ipt := &ensureCounter{Fake: iptables.NewFake()}
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", sayName)
	p := startProxier(t, Config{IPTables: ipt})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
	first := ipt.ensures.Load()
	if first != int32(len(hooks)) {
		t.Fatalf("first restore: %d hook checks, want %d", first, len(hooks))
	}
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}))) // no endpoints: REJECT instead
	if n := ipt.ensures.Load(); n != first {
		t.Errorf("a change's restore checked the hooks %d times, want none", n-first)
	}
	h := hooks[len(hooks)-1]
	if err := ipt.DeleteRule(context.Background(), h.table, h.chain, h.args()...); err != nil {
		t.Fatal(err)
	}
	if err := p.resync(true); err != nil { // Run's periodic resync
		t.Fatal(err)
	}
	if ok, err := ipt.HasRule(context.Background(), h.table, h.chain, h.args()...); err != nil || !ok {
		t.Errorf("the periodic resync did not put back the hook %s -> %s (%v)", h.chain, h.jump, err)
	}
}
