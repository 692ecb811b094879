package iptables

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// flakyIPT is a Fake whose next fail restores fail.
type flakyIPT struct {
	*kiptables.Fake
	mu   sync.Mutex
	fail int
}

func (f *flakyIPT) Restore(ctx context.Context, rules []byte) error {
	f.mu.Lock()
	var err error
	if f.fail > 0 {
		f.fail--
		err = errors.New("iptables-restore: line 7 failed")
	}
	f.mu.Unlock()
	if err == nil {
		err = f.Fake.Restore(ctx, rules)
	}
	return err
}

func newDataplane(t *testing.T, ipt kiptables.Interface, ct conntrack.Interface) *Dataplane {
	t.Helper()
	cfg := testConfig
	cfg.IPTables, cfg.Conntrack = ipt, ct
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustSync(t *testing.T, p *Dataplane, snap *service.Snapshot) {
	t.Helper()
	if err := p.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
}

// freshDump is what a new Dataplane's full sync of snap leaves in an empty kernel.
func freshDump(t *testing.T, snap *service.Snapshot) string {
	t.Helper()
	f := kiptables.NewFake()
	mustSync(t, newDataplane(t, f, nil), snap)
	return f.Dump()
}

// The snapshots a cluster goes through; each step is synced partially.
func history() []*service.Snapshot {
	web := func(eps []service.Endpoint, opts ...st.Opt) *service.Service {
		return st.Service("web", "198.18.0.10", 80, eps, append([]st.Opt{st.WithNodePort(30080)}, opts...)...)
	}
	api := st.Service("api", "198.18.0.20", 443, st.ThreeEndpoints()[:2])
	dns := st.Service("dns", "198.18.0.53", 53, st.ThreeEndpoints(), st.WithProtocol(service.UDP))
	return []*service.Snapshot{
		st.Snapshot(web(st.ThreeEndpoints()), api),
		st.Snapshot(web(st.ThreeEndpoints()[1:]), api),                                // an endpoint leaves
		st.Snapshot(web(st.ThreeEndpoints()[1:]), api, dns),                           // a service arrives
		st.Snapshot(web(nil), api, dns),                                               // no endpoints: REJECT
		st.Snapshot(web(st.ThreeEndpoints(), st.WithAffinity(time.Minute)), api, dns), // back, with affinity
		st.Snapshot(web(st.ThreeEndpoints(), st.WithExternalLocal()), dns),            // a service leaves, policy Local
		st.Snapshot(),
	}
}

// Partial syncs must leave the kernel exactly as a full sync from scratch would.
func TestPartialSyncConverges(t *testing.T) {
	f := kiptables.NewFake()
	p := newDataplane(t, f, nil)
	for i, snap := range history() {
		mustSync(t, p, snap)
		if got, want := f.Dump(), freshDump(t, snap); got != want {
			t.Fatalf("step %d: partial sync differs from a full one\n--- partial:\n%s\n--- full:\n%s", i, got, want)
		}
	}
	h := p.Health()
	if h.FullSyncs != 1 || h.PartialSyncs != uint64(len(history())-1) || !h.Healthy {
		t.Errorf("health %+v: want 1 full sync and %d partial ones", h, len(history())-1)
	}
}

// A partial sync writes only what changed: one endpoint leaving rewrites its
// port's chains and deletes the endpoint's chain; SVCP-SERVICES is untouched.
func TestPartialSyncText(t *testing.T) {
	tests := []struct {
		name     string
		from, to *service.Snapshot
	}{
		{"partial-endpoint-removed", history()[0], history()[1]},
		{"partial-service-added", history()[1], history()[2]},
		{"partial-no-change", history()[2], history()[2]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := kiptables.NewFake()
			p := newDataplane(t, f, nil)
			mustSync(t, p, tt.from)
			n0, _ := f.Restores()
			mustSync(t, p, tt.to)
			n, last := f.Restores()
			if n == n0 {
				last = []byte("# no restore\n")
			}
			checkGolden(t, tt.name, last)
		})
	}
}

func TestFullSyncEveryFullSyncPeriod(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	f := kiptables.NewFake()
	cfg := testConfig
	cfg.IPTables, cfg.FullSyncPeriod, cfg.Now = f, time.Minute, func() time.Time { return now }
	p, _ := New(cfg)
	snap := history()[0]
	mustSync(t, p, snap)
	now = now.Add(30 * time.Second)
	mustSync(t, p, snap)
	now = now.Add(31 * time.Second)
	mustSync(t, p, snap)
	if h := p.Health(); h.FullSyncs != 2 || h.PartialSyncs != 1 {
		t.Errorf("health %+v: want 2 full syncs (start, after a minute) and 1 partial", h)
	}
}

// The FullSyncPeriod counts from the end of the last full sync,
// so a full sync that takes longer than the period is followed by partial
// syncs, not by another full one.
func TestFullSyncPeriodFromTheEnd(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	slow := &slowIPT{Fake: kiptables.NewFake(), now: &now}
	cfg := testConfig
	cfg.IPTables, cfg.FullSyncPeriod, cfg.Now = slow, time.Minute, func() time.Time { return now }
	p, _ := New(cfg)
	slow.took = 90 * time.Second // the first (full) restore takes longer than the period
	mustSync(t, p, history()[0])
	slow.took = 0
	now = now.Add(time.Second)
	mustSync(t, p, history()[1])
	if h := p.Health(); h.FullSyncs != 1 || h.PartialSyncs != 1 {
		t.Errorf("health %+v: want the sync right after a long full sync to be partial", h)
	}
}

// Periodic syncs are partial while the hooks are in place; once per SyncPeriod
// a sync checks them, and one that finds a hook gone (another program flushed
// the table) is full and puts everything back.
func TestMissingHookRepaired(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	f := kiptables.NewFake()
	cfg := testConfig
	cfg.IPTables, cfg.SyncPeriod, cfg.Now = f, 30*time.Second, func() time.Time { return now }
	p, _ := New(cfg)
	snap := history()[0]
	mustSync(t, p, snap)
	want := f.Dump()
	now = now.Add(30 * time.Second)
	mustSync(t, p, snap) // checked: intact
	if h := p.Health(); h.FullSyncs != 1 || h.PartialSyncs != 1 || h.Repairs != 0 {
		t.Fatalf("health %+v: want the periodic sync partial, no repair", h)
	}
	h := hooks[len(hooks)-1] // nat POSTROUTING -> SVCP-POSTROUTING
	if err := f.DeleteRule(context.Background(), kiptables.Table(h.table), h.chain, h.args...); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second)
	mustSync(t, p, snap) // not checked yet: less than SyncPeriod since
	if hp := p.Health(); hp.Repairs != 0 || f.Dump() == want {
		t.Fatalf("health %+v: checked before SyncPeriod passed", hp)
	}
	now = now.Add(20 * time.Second)
	mustSync(t, p, snap) // checked: the hook is gone
	hp := p.Health()
	if hp.FullSyncs != 2 || hp.Repairs != 1 || !strings.Contains(hp.LastRepair, "hook nat/POSTROUTING -> SVCP-POSTROUTING: missing") {
		t.Errorf("health %+v: want a full sync that repairs the missing hook", hp)
	}
	if got := f.Dump(); got != want {
		t.Errorf("after the repair:\n%s\nwant:\n%s", got, want)
	}
}

// slowIPT is a Fake whose restores take took on a fake clock.
type slowIPT struct {
	*kiptables.Fake
	now  *time.Time
	took time.Duration
}

func (s *slowIPT) Restore(ctx context.Context, rules []byte) error {
	*s.now = s.now.Add(s.took)
	return s.Fake.Restore(ctx, rules)
}

// Before the first Snapshot there is nothing to apply, so a new Dataplane's
// resync (Run's timer) leaves the rules it finds alone.
func TestNoSyncBeforeSnapshot(t *testing.T) {
	f := kiptables.NewFake()
	mustSync(t, newDataplane(t, f, nil), history()[0])
	before := f.Dump()
	n0, _ := f.Restores()
	restarted := newDataplane(t, f, nil)
	if err := restarted.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Restores(); n != n0 || f.Dump() != before {
		t.Errorf("a resync before the first Snapshot changed the rules:\n%s", f.Dump())
	}
	if h := restarted.Health(); h.Synced {
		t.Errorf("health %+v: want not synced before the first Snapshot", h)
	}
}

// A failed restore is reported, and the next sync is a full one that repairs
// whatever the failure left.
func TestSyncFailure(t *testing.T) {
	ipt := &flakyIPT{Fake: kiptables.NewFake()}
	p := newDataplane(t, ipt, nil)
	mustSync(t, p, history()[0])
	ipt.fail = 1
	if err := p.Sync(context.Background(), history()[1]); err == nil {
		t.Fatal("sync succeeded with a failing restore")
	}
	h := p.Health()
	if h.Healthy || !strings.Contains(h.LastError, "line 7 failed") || h.Failures != 1 || !h.Synced {
		t.Errorf("after a failure: health %+v", h)
	}
	if err := p.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = p.Health()
	if !h.Healthy || h.LastError != "" || h.FullSyncs != 2 || h.ConsecutiveFailures != 0 {
		t.Errorf("after recovery: health %+v, want healthy after a second full sync", h)
	}
	if got, want := ipt.Dump(), freshDump(t, history()[1]); got != want {
		t.Errorf("after recovery:\n%s\nwant:\n%s", got, want)
	}
}

// A new process adopts the rules of the old one: its first (full) sync rewrites
// them in place and deletes the chains that belong to nothing now. Chains of other
// owners stay.
func TestAdoptOnRestart(t *testing.T) {
	f := kiptables.NewFake()
	ctx := context.Background()
	if err := f.Restore(ctx, []byte("*nat\n:SVCP-PORTALS - [0:0]\n-A OUTPUT -j SVCP-PORTALS\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	mustSync(t, newDataplane(t, f, nil), history()[2]) // the old process
	restarted := newDataplane(t, f, nil)
	mustSync(t, restarted, history()[5])
	got := f.Dump()
	for _, c := range []string{"SVCP-PORTALS"} {
		if !strings.Contains(got, ":"+c+" ") {
			t.Errorf("foreign chain %s deleted", c)
		}
	}
	want := freshDump(t, history()[5])
	got = strings.ReplaceAll(strings.ReplaceAll(got, ":SVCP-PORTALS - [0:0]\n", ""), "-A OUTPUT -j SVCP-PORTALS\n", "")
	if got != want {
		t.Errorf("after restart:\n%s\nwant:\n%s", got, want)
	}
}

func TestCleanup(t *testing.T) {
	f := kiptables.NewFake()
	ctx := context.Background()
	foreign := "*nat\n:SVCP-PORTALS - [0:0]\n-A OUTPUT -j SVCP-PORTALS\nCOMMIT\n"
	if err := f.Restore(ctx, []byte(foreign)); err != nil {
		t.Fatal(err)
	}
	_, _ = f.Save(ctx, kiptables.TableFilter) // the kernel has an empty filter table
	before := f.Dump()
	mustSync(t, newDataplane(t, f, nil), history()[4])
	for range 2 {
		if err := Cleanup(ctx, f); err != nil {
			t.Fatal(err)
		}
		if got := f.Dump(); got != before {
			t.Errorf("after Cleanup:\n%s\nwant:\n%s", got, before)
		}
		if got := f.Dump(); strings.Contains(strings.ReplaceAll(got, "SVCP-PORTALS", ""), "SVCP-") {
			t.Errorf("after Cleanup, rules of ours are left:\n%s", got)
		}
	}
}

func TestStatus(t *testing.T) {
	p := newDataplane(t, kiptables.NewFake(), nil)
	mustSync(t, p, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithNodePort(30080), st.WithExternalLocal())))
	st := p.Ports()
	if len(st) != 1 || st[0].Port != "default/web:p" || !st[0].HasEndpoints || len(st[0].Chains) != 6 {
		t.Fatalf("status %+v", st)
	}
	var got []string
	for _, e := range st[0].Endpoints {
		got = append(got, e.From[:8]+" "+e.Addr+" "+e.Probability)
	}
	want := []string{
		"SVCP-SVC 198.19.1.10:8080 0.3333333333", "SVCP-SVC 198.19.1.11:8080 0.5000000000", "SVCP-SVC 198.19.1.130:8080 1",
		"SVCP-SVL 198.19.1.10:8080 0.5000000000", "SVCP-SVL 198.19.1.11:8080 1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("endpoints:\n%q\nwant\n%q", got, want)
	}
}

// UDP flows to a removed endpoint are deleted, flows to the others stay; a UDP
// port getting its first endpoints clears flows to its addresses.
func TestConntrackCleanup(t *testing.T) {
	vip := netip.MustParseAddr("198.18.0.53")
	client := netip.MustParseAddrPort("198.19.1.50:5353")
	flow := func(dst, ep string) conntrack.Flow {
		return conntrack.Flow{Protocol: "udp", Src: client, OrigDst: netip.MustParseAddrPort(dst), DstNAT: netip.MustParseAddrPort(ep)}
	}
	dns := func(eps []service.Endpoint) *service.Service {
		return st.Service("dns", "198.18.0.53", 53, eps, st.WithProtocol(service.UDP), st.WithNodePort(30053))
	}
	ct := conntrack.NewFake()
	p := newDataplane(t, kiptables.NewFake(), ct)
	mustSync(t, p, st.Snapshot(dns(st.ThreeEndpoints())))
	ct.Add(flow("198.18.0.53:53", "198.19.1.10:8080"), flow("198.18.0.53:53", "198.19.1.11:8080"),
		flow("198.19.0.1:30053", "198.19.1.10:8080"))
	mustSync(t, p, st.Snapshot(dns(st.ThreeEndpoints()[1:])))
	if got, want := ct.Flows(), []conntrack.Flow{flow("198.18.0.53:53", "198.19.1.11:8080")}; !slices.Equal(got, want) {
		t.Errorf("flows after removing 198.19.1.10: %v, want %v", got, want)
	}

	mustSync(t, p, st.Snapshot(dns(nil)))
	ct.Add(flow("198.18.0.53:53", "198.18.0.53:53")) // sent while rejected
	before := len(ct.Deletes())
	mustSync(t, p, st.Snapshot(dns(st.ThreeEndpoints())))
	if got := ct.Flows(); len(got) != 0 {
		t.Errorf("flows after the first endpoints: %v, want none", got)
	}
	want := []conntrack.Filter{{Protocol: "udp", OrigDstPort: 30053, Family: conntrack.IPv4}, {Protocol: "udp", OrigDst: vip, OrigDstPort: 53, Family: conntrack.IPv4}}
	if got := ct.Deletes()[before:]; !slices.Equal(got, want) {
		t.Errorf("deletes %v, want %v", got, want)
	}
	if h := p.Health(); h.ConntrackDeleted != 4 {
		t.Errorf("health %+v: want 4 conntrack entries deleted (2 of the removed endpoint, 1 of the last one, 1 sent while rejected)", h)
	}
}

// A partial sync keeps a port's rules while service.Port.RendersSameAs says
// the port renders the same: after a change of any one field of a port
// (servicetest.Variants), the kernel and the status must be what a full sync
// writes.
func TestPartialSyncEveryField(t *testing.T) {
	st.CheckPartialSyncs(t, newFakePath, nil)
}

// fakePath is a Dataplane on a Fake, as servicetest's checks drive it.
type fakePath struct {
	f *kiptables.Fake
	p *Dataplane
}

func newFakePath(t *testing.T) st.Path {
	f := kiptables.NewFake()
	return &fakePath{f: f, p: newDataplane(t, f, nil)}
}

func (fp *fakePath) Sync(t *testing.T, snap *service.Snapshot) { mustSync(t, fp.p, snap) }
func (fp *fakePath) Restart(t *testing.T)                      { fp.p = newDataplane(t, fp.f, nil) }

func (fp *fakePath) State(t *testing.T) string {
	status, err := json.MarshalIndent(fp.p.Ports(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return fp.f.Dump() + string(status)
}
