package kernelsync

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/service"
)

// port is a rendered port of the test path: a name and its flows.
type port struct {
	name  service.PortName
	from  *service.Port
	zone  string
	flows Flows
}

func (p *port) Name() service.PortName                { return p.name }
func (p *port) RenderedFrom() (*service.Port, string) { return p.from, p.zone }
func (p *port) Flows() *Flows                         { return &p.flows }

// mode is what the test path does its own way: it renders one UDP port per
// Service, endpoints from the Snapshot, and records how each sync was
// written; fail fails the next write. Its kernel check fails while lost says
// what was lost, and counts its calls.
type mode struct {
	fail    bool
	writes  []string // "full" or "partial", per write
	lost    string
	checks  int
	onWrite func(full bool) // if set, called at each write (a test's clock)
}

func (m *mode) render(snap *service.Snapshot, applied map[service.PortName]*port) Ports[*port] {
	var r Ports[*port]
	here := map[service.PortName]bool{}
	for _, p := range snap.Ports() {
		cur := &port{name: p.Name, from: p, flows: Flows{Family: conntrack.IPv4, Protocol: "udp", Port: p.Port, Frontends: p.Service.ClusterIPs, HasEndpoints: len(p.Endpoints) > 0}}
		for _, e := range p.Endpoints {
			cur.flows.Endpoints = append(cur.flows.Endpoints, e.Addr.Addr())
		}
		slices.SortFunc(cur.flows.Endpoints, netip.Addr.Compare)
		r.All = append(r.All, cur)
		r.Changed = append(r.Changed, Change[*port]{Old: applied[p.Name], Cur: cur})
		here[p.Name] = true
	}
	for name, old := range applied {
		if !here[name] {
			r.Removed = append(r.Removed, old)
		}
	}
	return r
}

func (m *mode) write(r Ports[*port], full bool) (int, error) {
	if m.onWrite != nil {
		m.onWrite(full)
	}
	if m.fail {
		m.fail = false
		return 0, errors.New("restore failed")
	}
	m.writes = append(m.writes, map[bool]string{true: "full", false: "partial"}[full])
	return len(r.All), nil
}

func (m *mode) check() error {
	m.checks++
	if m.lost != "" {
		return errors.New(m.lost)
	}
	return nil
}

// path syncs as iptables' and nftables' Dataplanes do, on a Ledger, with
// mode's rendering and writing: Update hands a Snapshot over (the Syncer
// does, in the paths), Sync applies it; nothing before the first Update.
type path struct {
	*Ledger[*port]
	m    *mode
	snap *service.Snapshot
}

func newPath(cfg Config, m *mode) *path { return &path{Ledger: NewLedger[*port](cfg), m: m} }

func (p *path) Update(snap *service.Snapshot) { p.snap = snap }

// Sync applies the Snapshot as the paths' Dataplanes do (Dataplane.apply):
// one sync, and when it wrote a periodic full sync's changes
// (Sync.ChangesFirst), the full sync right after.
func (p *path) Sync(ctx context.Context) error {
	if p.snap == nil {
		return nil
	}
	err := p.sync(ctx)
	if p.FullNext() {
		return p.sync(ctx)
	}
	return err
}

// sync is the path's own sync.
func (p *path) sync(ctx context.Context) error {
	s := p.Begin()
	if s.Check {
		p.Checked(s, p.m.check())
	}
	r := p.m.render(p.snap, s.Applied)
	size, err := p.m.write(r, s.Full)
	return p.End(ctx, s, r, size, err)
}

func udpService(eps ...string) *service.Snapshot {
	s := &service.Service{NamespacedName: service.NamespacedName{Namespace: "default", Name: "dns"}, Type: service.TypeClusterIP,
		ClusterIPs: []netip.Addr{netip.MustParseAddr("198.18.0.53")}}
	p := &service.Port{Name: service.PortName{NamespacedName: s.NamespacedName, Port: "dns", Protocol: service.UDP},
		Service: s, Port: 53, Protocol: service.UDP}
	for _, e := range eps {
		p.Endpoints = append(p.Endpoints, service.Endpoint{Addr: netip.MustParseAddrPort(e), Ready: true, Serving: true})
	}
	s.Ports = []*service.Port{p}
	return service.NewSnapshot([]*service.Service{s}, nil)
}

// A sync is full at first, after a failure and a FullSyncPeriod after the last
// full one ended; partial otherwise. Nothing is synced before the first Update.
// A partial sync deletes the conntrack entries of its changes; a full one,
// which has no complete change list, reconciles the table with every port it
// wrote (Stale; the first sync, which adopts what it finds, only that way).
func TestLedgerSyncs(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &mode{}
	ct := conntrack.NewFake()
	p := newPath(Config{Periods: Periods{Conntrack: ct, SyncPeriod: time.Minute, FullSyncPeriod: time.Minute, Now: func() time.Time { return now }}}, m)
	ctx := context.Background()
	if err := p.Sync(ctx); err != nil || len(m.writes) != 0 || p.Health().Synced {
		t.Fatalf("before the first Update: err %v, writes %v, health %+v", err, m.writes, p.Health())
	}
	step := func(snap *service.Snapshot, advance time.Duration) error {
		now = now.Add(advance)
		p.Update(snap)
		return p.Sync(ctx)
	}
	_ = step(udpService("198.19.1.2:53", "198.19.1.3:53"), 0)
	_ = step(udpService("198.19.1.2:53"), 30*time.Second) // an endpoint leaves
	m.fail = true
	if err := step(udpService("198.19.1.2:53"), time.Second); err == nil {
		t.Fatal("want the injected failure")
	}
	if h := p.Health(); h.Healthy || h.ConsecutiveFailures != 1 || h.LastError != "restore failed" {
		t.Errorf("after a failure: %+v", h)
	}
	_ = step(udpService("198.19.1.2:53"), time.Second)    // full: the failure
	_ = step(udpService("198.19.1.2:53"), 59*time.Second) // partial: 59s after the last full one
	_ = step(udpService("198.19.1.2:53"), time.Second)    // FullSyncPeriod since then: the changes, then full
	if want := []string{"full", "partial", "full", "partial", "partial", "full"}; !slices.Equal(m.writes, want) {
		t.Errorf("syncs %v, want %v", m.writes, want)
	}
	h := p.Health()
	if !h.Healthy || h.FullSyncs != 3 || h.PartialSyncs != 3 || h.Failures != 1 || h.PartialFailures != 1 || h.Size != 1 {
		t.Errorf("health %+v (the failure was a partial sync's)", h)
	}
	// kube-proxy's histograms: one sample per full, per partial sync, and per
	// conntrack cleanup after a successful sync.
	for _, c := range []struct {
		h    prometheus.Histogram
		want uint64
	}{{p.fullDuration, 3}, {p.partialDuration, 3}, {p.conntrackDuration, 6}} {
		var m dto.Metric
		if err := c.h.Write(&m); err != nil {
			t.Fatal(err)
		}
		if n := m.GetHistogram().GetSampleCount(); n != c.want {
			t.Errorf("%s: %d samples, want %d", c.h.Desc(), n, c.want)
		}
	}
	want := []conntrack.Filter{{Protocol: "udp", OrigDst: netip.MustParseAddr("198.18.0.53"), OrigDstPort: 53, DstNAT: netip.MustParseAddr("198.19.1.3"), Family: conntrack.IPv4}}
	if got := ct.Deletes(); !slices.Equal(got, want) || h.ConntrackDeleted != 0 || h.ConntrackErrors != 0 {
		t.Errorf("conntrack deletes %v, want %v (the endpoint that left, not the first sync's); health %+v", got, want, h)
	}
	fe := netip.MustParseAddrPort("198.18.0.53:53")
	stales := ct.Stales()
	if len(stales) != 3 {
		t.Fatalf("conntrack reconciliations %v, want one per full sync", stales)
	}
	for i, eps := range [][]netip.Addr{
		{netip.MustParseAddr("198.19.1.2"), netip.MustParseAddr("198.19.1.3")},
		{netip.MustParseAddr("198.19.1.2")},
		{netip.MustParseAddr("198.19.1.2")},
	} {
		if s := stales[i]; s.Family != conntrack.IPv4 || len(s.Frontends) != 1 || !slices.Equal(s.Frontends[fe], eps) || len(s.NodePorts) != 0 {
			t.Errorf("full sync %d reconciled with %+v, want %s with endpoints %v", i, s, fe, eps)
		}
	}
}

// A UDP port whose endpoints went to zero: a partial sync deletes its
// entries to the endpoint that left; and a new process, whose first sync
// knows nothing of what came before, deletes every entry to its frontends
// that an earlier one left behind (kubernetes#139629): a one-way sender's
// entry to the deleted endpoint, and one never DNATed. TCP entries stay.
func TestLedgerEndpointsToZero(t *testing.T) {
	vip := netip.MustParseAddrPort("198.18.0.53:53")
	flow := func(proto string, sport uint16, nat string) conntrack.Flow {
		return conntrack.Flow{Protocol: proto, Src: netip.AddrPortFrom(netip.MustParseAddr("198.19.10.2"), sport), OrigDst: vip, DstNAT: netip.MustParseAddrPort(nat)}
	}
	toGone := flow("udp", 5000, "198.19.1.2:53")
	neverNATed := flow("udp", 5001, "198.18.0.53:53")
	tcp := flow("tcp", 5002, "198.19.1.2:53")
	ctx := context.Background()
	sync := func(t *testing.T, p *path, snap *service.Snapshot) {
		t.Helper()
		p.Update(snap)
		if err := p.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("partial sync", func(t *testing.T) {
		ct := conntrack.NewFake()
		p := newPath(Config{Periods: Periods{Conntrack: ct}}, &mode{})
		sync(t, p, udpService("198.19.1.2:53"))
		ct.Add(toGone, tcp)
		sync(t, p, udpService())
		if got, want := ct.Flows(), []conntrack.Flow{tcp}; !slices.Equal(got, want) {
			t.Errorf("flows left %v, want %v", got, want)
		}
		if h := p.Health(); h.ConntrackDeleted != 1 {
			t.Errorf("health %+v, want 1 conntrack entry deleted", h)
		}
	})
	t.Run("first sync", func(t *testing.T) {
		ct := conntrack.NewFake(toGone, neverNATed, tcp)
		p := newPath(Config{Periods: Periods{Conntrack: ct}}, &mode{})
		sync(t, p, udpService())
		if got, want := ct.Flows(), []conntrack.Flow{tcp}; !slices.Equal(got, want) {
			t.Errorf("flows left %v, want %v (the UDP entries of a port without endpoints stayed)", got, want)
		}
		if h := p.Health(); h.ConntrackDeleted != 2 {
			t.Errorf("health %+v, want 2 conntrack entries deleted", h)
		}
	})
}

// failing is a conntrack table whose next failDeletes Delete calls and next
// failWalks DeleteStale calls fail.
type failing struct {
	*conntrack.Fake
	failDeletes, failWalks int
}

func (f *failing) Delete(ctx context.Context, flt conntrack.Filter) (int, error) {
	if f.failDeletes > 0 {
		f.failDeletes--
		return 0, errors.New("conntrack: netlink: no buffer space available")
	}
	return f.Fake.Delete(ctx, flt)
}

func (f *failing) DeleteStale(ctx context.Context, s conntrack.Stale) (int, error) {
	if f.failWalks > 0 {
		f.failWalks--
		return 0, errors.New("conntrack: netlink: no buffer space available")
	}
	return f.Fake.DeleteStale(ctx, s)
}

// A conntrack cleanup that failed is tried again at the next sync, although
// it is partial and changes nothing: the deletion of a port's last endpoint,
// of a deleted Service's (no later walk knows its frontends), and the first
// sync's walk.
func TestLedgerRetriesConntrack(t *testing.T) {
	toGone := conntrack.Flow{Protocol: "udp", Src: netip.MustParseAddrPort("198.19.10.2:5000"),
		OrigDst: netip.MustParseAddrPort("198.18.0.53:53"), DstNAT: netip.MustParseAddrPort("198.19.1.2:53")}
	none := service.NewSnapshot(nil, nil)
	for _, tt := range []struct {
		name           string
		before, after  *service.Snapshot // the sync before the entry, the one that fails
		deletes, walks int               // failures injected
	}{
		{"the last endpoint leaves", udpService("198.19.1.2:53"), udpService(), 1, 0},
		{"the Service is deleted", udpService("198.19.1.2:53"), none, 1, 0},
		{"the first sync's walk", nil, udpService(), 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ct := &failing{Fake: conntrack.NewFake()}
			m := &mode{}
			p := newPath(Config{Periods: Periods{Conntrack: ct}}, m)
			sync := func(snap *service.Snapshot) {
				t.Helper()
				p.Update(snap)
				if err := p.Sync(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if tt.before != nil {
				sync(tt.before)
			}
			ct.Add(toGone)
			ct.failDeletes, ct.failWalks = tt.deletes, tt.walks
			sync(tt.after)
			if h := p.Health(); h.ConntrackErrors != 1 || len(ct.Flows()) != 1 {
				t.Fatalf("the failed cleanup: health %+v, flows %v; want one error, the entry left", h, ct.Flows())
			}
			sync(tt.after) // nothing changed: a partial sync
			if h := p.Health(); h.ConntrackErrors != 1 || h.ConntrackDeleted != 1 || len(ct.Flows()) != 0 {
				t.Errorf("the next sync: health %+v, flows %v; want the entry deleted", h, ct.Flows())
			}
			if got := m.writes[len(m.writes)-1]; got != "partial" {
				t.Errorf("the next sync was %s, want partial: the retry needs no full sync", got)
			}
			n := len(ct.Deletes()) + len(ct.Stales())
			sync(tt.after)
			if got := len(ct.Deletes()) + len(ct.Stales()); got != n {
				t.Errorf("a third sync cleaned again (%d calls, then %d): a retry must happen once", n, got)
			}
		})
	}
}

// Periodic syncs stay partial (kube-proxy: a full sync only hourly or after an
// error) while the kernel check passes; the check runs at most once per
// SyncPeriod, and a failed one makes that sync full: the repair of a table
// another program flushed.
func TestLedgerCheckRepairs(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &mode{}
	p := newPath(Config{Periods: Periods{SyncPeriod: 30 * time.Second, Now: func() time.Time { return now }}}, m)
	ctx := context.Background()
	p.Update(udpService("198.19.1.2:53"))
	step := func(advance time.Duration) {
		t.Helper()
		now = now.Add(advance)
		if err := p.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	step(0)                // full: the first
	step(30 * time.Second) // partial: checked, intact
	step(10 * time.Second) // partial: not checked, less than SyncPeriod since
	m.lost = "hook nat/PREROUTING -> SVCP-SERVICES: missing"
	step(20 * time.Second) // full: checked, lost
	m.lost = ""
	step(10 * time.Second) // partial: the repair counts as a check
	step(30 * time.Second) // partial: checked, intact
	if want := []string{"full", "partial", "partial", "full", "partial", "partial"}; !slices.Equal(m.writes, want) {
		t.Errorf("syncs %v, want %v", m.writes, want)
	}
	if m.checks != 3 {
		t.Errorf("%d checks, want 3 (one per SyncPeriod, none right after a full sync)", m.checks)
	}
	h := p.Health()
	if h.Repairs != 1 || h.LastRepair != "hook nat/PREROUTING -> SVCP-SERVICES: missing" || h.FullSyncs != 2 {
		t.Errorf("health %+v: want 1 repair saying what was lost, 2 full syncs", h)
	}
	// FullSyncPeriod's default is kube-proxy's proxyutil.FullSyncPeriod: the
	// sync an hour after the end of the last full one is full again.
	step(time.Hour - 40*time.Second - time.Second)
	step(time.Second)
	if want := []string{"partial", "partial", "full"}; !slices.Equal(m.writes[6:], want) {
		t.Errorf("59m59s and 1h after the last full sync: %v, want %v (at 1h the changes, then full)", m.writes[6:], want)
	}
}

// In a large cluster (Config.LargeCluster) the period makes no sync full; a
// failure still does.
func TestLedgerLargeCluster(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &mode{}
	p := newPath(Config{Periods: Periods{FullSyncPeriod: time.Minute, Now: func() time.Time { return now }}, LargeCluster: func() bool { return true }}, m)
	ctx := context.Background()
	step := func(advance time.Duration) {
		now = now.Add(advance)
		p.Update(udpService("198.19.1.2:53"))
		_ = p.Sync(ctx)
	}
	step(0)
	step(2 * time.Minute) // past the period: partial all the same
	m.fail = true
	step(time.Second)
	m.fail = false
	step(time.Second)                                                               // after the failure: full
	if want := []string{"full", "partial", "full"}; !slices.Equal(m.writes, want) { // the failed write is not one
		t.Errorf("syncs %v, want %v", m.writes, want)
	}
}
