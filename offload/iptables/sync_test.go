package iptables

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/ruletest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

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

// A partial sync writes only what changed: one endpoint leaving rewrites its
// port's chains and deletes the endpoint's chain; SVCP-SERVICES is untouched.
func TestPartialSyncText(t *testing.T) {
	tests := []struct {
		name     string
		from, to *service.Snapshot
	}{
		{"partial-endpoint-removed", ruletest.History()[0], ruletest.History()[1]},
		{"partial-service-added", ruletest.History()[1], ruletest.History()[2]},
		{"partial-no-change", ruletest.History()[2], ruletest.History()[2]},
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

// Above 1,000 endpoints the periodic full sync is skipped, as kube-proxy's
// largeClusterMode does: at that size it takes seconds, and the changes
// that arrive meanwhile wait as long (bench/kubeproxy measured 9.4 s at the
// p99 with it at 1,000 Services of 10 endpoints). The endpoints counted are
// every port's, as kube-proxy's totalEndpoints.
func TestNoPeriodicFullSyncInALargeCluster(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	f := kiptables.NewFake()
	cfg := testConfig
	cfg.IPTables, cfg.FullSyncPeriod, cfg.Now = f, time.Minute, func() time.Time { return now }
	p, _ := New(cfg)
	var svcs []*service.Service
	for i := range 334 { // 1,002 endpoints
		svcs = append(svcs, st.Service(fmt.Sprintf("web-%d", i), fmt.Sprintf("198.18.%d.%d", 1+i/250, i%250), 80, st.ThreeEndpoints()))
	}
	large := st.Snapshot(svcs...)
	mustSync(t, p, large)
	// And, as kube-proxy's, the endpoints' rules go without comments; the
	// Services' keep theirs.
	endpointRules := 0
	for _, line := range strings.Split(f.Dump(), "\n") {
		switch {
		case strings.HasPrefix(line, "-A "+prefixSEP) || (strings.HasPrefix(line, "-A "+prefixSVC) && strings.Contains(line, "-j "+prefixSEP)):
			endpointRules++
			if strings.Contains(line, "--comment") {
				t.Fatalf("an endpoint's rule with a comment in a large cluster: %s", line)
			}
		case strings.HasPrefix(line, "-A SVCP-SERVICES -d"), strings.HasPrefix(line, "-A SVCP-SERVICES -m"):
			if !strings.Contains(line, "--comment") {
				t.Fatalf("a Service's rule without its comment: %s", line)
			}
		}
	}
	if endpointRules != 3*1002 {
		t.Errorf("%d endpoint rules, want %d", endpointRules, 3*1002)
	}
	now = now.Add(2 * time.Minute)
	mustSync(t, p, large)
	if h := p.Health(); h.FullSyncs != 1 || h.PartialSyncs != 1 {
		t.Errorf("health %+v: want the first sync full and the one after the period partial", h)
	}
	mustSync(t, p, st.Snapshot(svcs[:333]...)) // 999 endpoints: the period is due again
	if h := p.Health(); h.FullSyncs != 2 || h.PartialSyncs != 2 {
		t.Errorf("health %+v: want the sync past the period full below 1,000 endpoints (its change first)", h)
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
	mustSync(t, p, ruletest.History()[0])
	slow.took = 0
	now = now.Add(time.Second)
	mustSync(t, p, ruletest.History()[1])
	if h := p.Health(); h.FullSyncs != 1 || h.PartialSyncs != 1 {
		t.Errorf("health %+v: want the sync right after a long full sync to be partial", h)
	}
}

// Periodic syncs are partial while the canary is in mangle; once per
// SyncPeriod a sync checks it, and one that finds it gone (another program
// reset the tables) is full and puts everything back (internal/ruletest).
func TestMissingCanaryRepaired(t *testing.T) {
	ruletest.CheckRepaired(t, rules, ruletest.FakeLoss{
		Name: "tables reset", Repair: "canary mangle/SVCP-PROXY-CANARY: missing",
		Do: func(t *testing.T, r ruletest.Rig) {
			var reset strings.Builder
			for _, table := range canaryTables {
				reset.WriteString("*" + table + "\n:" + chainCanary + " - [0:0]\n-X " + chainCanary + "\nCOMMIT\n")
			}
			if err := r.(*rig).ipt.Restore(context.Background(), []byte(reset.String())); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// When the canary is gone from mangle but not yet from nat, a reload is
// still under way: check looks again until the others are gone too, or
// canaryFlushTimeout has passed, as kube-proxy's Monitor does; either way
// it reports the tables reset. With the canary in place it reads mangle
// alone.
func TestCheckWaitsForEveryCanary(t *testing.T) {
	defer func(timeout, poll time.Duration) { canaryFlushTimeout, canaryFlushPoll = timeout, poll }(canaryFlushTimeout, canaryFlushPoll)
	canaryFlushTimeout, canaryFlushPoll = time.Minute, time.Millisecond
	ctx := context.Background()
	saves := &savesIPT{Fake: kiptables.NewFake()}
	p := newDataplane(t, saves, nil)
	mustSync(t, p, ruletest.History()[2])
	saves.tables = nil
	if err := p.check(ctx); err != nil {
		t.Fatalf("after a full sync: %v", err)
	}
	if !slices.Equal(saves.tables, []kiptables.Table{kiptables.TableMangle}) {
		t.Errorf("the check read %v, want mangle alone", saves.tables)
	}
	drop := func(table string) {
		t.Helper()
		if err := saves.Restore(ctx, []byte("*"+table+"\n:"+chainCanary+" - [0:0]\n-X "+chainCanary+"\nCOMMIT\n")); err != nil {
			t.Fatal(err)
		}
	}
	drop(tableMangle)
	drop(tableFilter)
	saves.onSave = func(n int) { // the reload reaches nat a few looks later
		if n == 5 {
			drop(tableNAT)
		}
	}
	saves.tables = nil
	err := p.check(ctx)
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("check: %v, want the canary missing", err)
	}
	if n := len(saves.tables); n < 5 {
		t.Errorf("the check read %d tables, want it to look until nat's canary went", n)
	}
	canaryFlushTimeout = 20 * time.Millisecond // a canary that never goes: it gives up
	mustSync(t, p, ruletest.History()[2])
	drop(tableMangle)
	saves.onSave = nil
	if err := p.check(ctx); err == nil {
		t.Error("check with the mangle canary gone and the others left: no error")
	}
}

// savesIPT is a Fake that records the tables each Save reads.
type savesIPT struct {
	*kiptables.Fake
	tables []kiptables.Table
	onSave func(n int)
}

func (s *savesIPT) Save(ctx context.Context, table kiptables.Table) ([]byte, error) {
	s.tables = append(s.tables, table)
	if s.onSave != nil {
		s.onSave(len(s.tables))
	}
	return s.Fake.Save(ctx, table)
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

// A new process adopts the rules of the old one: its first (full) sync rewrites
// them in place and deletes the chains that belong to nothing now. Chains of other
// owners stay.
func TestAdoptOnRestart(t *testing.T) {
	f := kiptables.NewFake()
	ctx := context.Background()
	if err := f.Restore(ctx, []byte("*nat\n:SVCP-PORTALS - [0:0]\n-A OUTPUT -j SVCP-PORTALS\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	mustSync(t, newDataplane(t, f, nil), ruletest.History()[2]) // the old process
	restarted := newDataplane(t, f, nil)
	mustSync(t, restarted, ruletest.History()[5])
	got := f.Dump()
	for _, c := range []string{"SVCP-PORTALS"} {
		if !strings.Contains(got, ":"+c+" ") {
			t.Errorf("foreign chain %s deleted", c)
		}
	}
	want := freshDump(t, ruletest.History()[5])
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
	_, _ = f.Save(ctx, kiptables.TableFilter) // the kernel has empty filter and mangle tables
	_, _ = f.Save(ctx, kiptables.TableMangle)
	before := f.Dump()
	mustSync(t, newDataplane(t, f, nil), ruletest.History()[4])
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

// commandsIPT is a Fake that counts the commands a sync runs.
type commandsIPT struct {
	*kiptables.Fake
	restores, checks, ensures int
}

func (c *commandsIPT) Restore(ctx context.Context, rules []byte) error {
	c.restores++
	return c.Fake.Restore(ctx, rules)
}

func (c *commandsIPT) HasRule(ctx context.Context, t kiptables.Table, chain string, args ...string) (bool, error) {
	c.checks++
	return c.Fake.HasRule(ctx, t, chain, args...)
}

func (c *commandsIPT) EnsureRule(ctx context.Context, pos kiptables.Position, t kiptables.Table, chain string, args ...string) (bool, error) {
	c.ensures++
	return c.Fake.EnsureRule(ctx, pos, t, chain, args...)
}

// A cold start's full sync writes the hooks in its one restore, with the
// chains they jump to, and checks none (none of our chains exist): on the
// legacy backend every `iptables -C` or `-I` reads the whole table. A
// restarted process finds the hooks in place and inserts none again.
func TestFullSyncWritesHooksInItsRestore(t *testing.T) {
	ctx := context.Background()
	c := &commandsIPT{Fake: kiptables.NewFake()}
	p := newDataplane(t, c, nil)
	mustSync(t, p, ruletest.History()[2])
	if c.restores != 1 || c.checks != 0 || c.ensures != 0 {
		t.Errorf("cold start: %d restores, %d checks, %d ensures; want 1, 0, 0", c.restores, c.checks, c.ensures)
	}
	if err := p.check(ctx); err != nil {
		t.Errorf("after the cold start: %v", err)
	}
	*c = commandsIPT{Fake: c.Fake}
	mustSync(t, newDataplane(t, c, nil), ruletest.History()[2])
	if c.restores != 1 || c.checks != len(hooks) || c.ensures != 0 {
		t.Errorf("restart: %d restores, %d checks, %d ensures; want 1, %d, 0", c.restores, c.checks, c.ensures, len(hooks))
	}
	if got, want := c.Dump(), freshDump(t, ruletest.History()[2]); got != want {
		t.Errorf("after the restart:\n%s\nwant:\n%s", got, want)
	}
}

// nfTablesIPT is a Fake that says it runs on nf_tables, recording each
// restore's input.
type nfTablesIPT struct {
	*kiptables.Fake
	restores []string
}

func (n *nfTablesIPT) Backend() string { return kiptables.BackendNFTables }

func (n *nfTablesIPT) Restore(ctx context.Context, rules []byte) error {
	n.restores = append(n.restores, string(rules))
	return n.Fake.Restore(ctx, rules)
}

// On nf_tables a cold start writes its full sync in parts (coldPlans): the
// top chains empty first, the ports' chains, then the top chains' rules
// with the hooks, so that nothing jumps to a port before the last commit;
// it leaves what one restore leaves. A restart, with our chains in place,
// writes one restore.
func TestColdStartInParts(t *testing.T) {
	n := &nfTablesIPT{Fake: kiptables.NewFake()}
	snap := ruletest.History()[2]
	mustSync(t, newDataplane(t, n, nil), snap)
	if len(n.restores) != 3 {
		t.Fatalf("cold start: %d restores, want 3 (top chains, ports, top rules and hooks)", len(n.restores))
	}
	for i, in := range n.restores[:2] {
		if strings.Contains(in, "-A "+chainServices+" ") || strings.Contains(in, "-I ") {
			t.Errorf("restore %d jumps to the ports before the last one:\n%s", i+1, in)
		}
	}
	if !strings.Contains(n.restores[2], "-I PREROUTING ") {
		t.Errorf("the last restore has no hooks:\n%s", n.restores[2])
	}
	if got, want := n.Dump(), freshDump(t, snap); got != want {
		t.Errorf("after the cold start in parts:\n%s\nwant:\n%s", got, want)
	}
	n.restores = nil
	mustSync(t, newDataplane(t, n, nil), snap)
	if len(n.restores) != 1 {
		t.Errorf("restart: %d restores, want 1", len(n.restores))
	}
}
