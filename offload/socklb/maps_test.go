package socklb

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

var ap = netip.MustParseAddrPort

// recordingLB is a Fake that also records every element written, so a test
// can say which map updates a sync made.
type recordingLB struct {
	*ksocklb.Fake
	mu    sync.Mutex
	calls []string
}

func newRecordingLB() *recordingLB { return &recordingLB{Fake: ksocklb.NewFake()} }

func (r *recordingLB) SetService(ctx context.Context, svc ksocklb.Service, e ksocklb.Entry) error {
	r.mu.Lock()
	r.calls = append(r.calls, fmt.Sprintf("set %s %v", svc, e.Backends))
	r.mu.Unlock()
	return r.Fake.SetService(ctx, svc, e)
}

func (r *recordingLB) DeleteService(ctx context.Context, svc ksocklb.Service) error {
	r.mu.Lock()
	r.calls = append(r.calls, "delete "+svc.String())
	r.mu.Unlock()
	return r.Fake.DeleteService(ctx, svc)
}

// take returns the calls recorded since the last take.
func (r *recordingLB) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func newMaps(t *testing.T, cfg Config) *Maps {
	t.Helper()
	if cfg.NodeName == "" {
		cfg.NodeName = st.ThisNode
	}
	p, err := NewMaps(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustSync(t *testing.T, p *Maps, snap *service.Snapshot) {
	t.Helper()
	if err := p.Sync(context.Background(), snap.Family(p.cfg.Family)); err != nil {
		t.Fatal(err)
	}
}

// reach returns where n connect()s from one client reach, one per slot
// (Random 0..n-1), so each backend shows once: the spread the hook makes.
func reach(lb *ksocklb.Fake, proto ksocklb.Protocol, dst string, n int) []string {
	var out []string
	for i := range n {
		got, _ := lb.Connect(ksocklb.Client{NetnsCookie: 1, Random: uint32(i)}, proto, ap(dst))
		out = append(out, got.String())
	}
	return out
}

// TestMapsConnect renders a cluster into the maps and follows connect()
// calls through them: where does a socket in the cgroup that connects to a
// ClusterIP end up? Each row is one Service; the endpoints are chosen by
// service.Port.Categorize, as on every other path.
func TestMapsConnect(t *testing.T) {
	three := []string{"198.19.1.10:8080", "198.19.1.11:8080", "198.19.1.130:8080"}
	tests := []struct {
		name string
		svc  *service.Service
		node *service.Node
		dst  string
		want []string // what connect() with Random 0, 1, 2 reaches
	}{
		{"spread over three endpoints", st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()),
			nil, "198.18.0.10:80", three},
		{"UDP", st.Service("dns", "198.18.0.53", 53, st.ThreeEndpoints(), st.WithProtocol(service.UDP)),
			nil, "198.18.0.53:53", three},
		{"no endpoints: untouched (nftables beside rejects)", st.Service("empty", "198.18.0.11", 80, nil),
			nil, "198.18.0.11:80", []string{"198.18.0.11:80", "198.18.0.11:80", "198.18.0.11:80"}},
		{"internalTrafficPolicy Local: this node's two only", st.Service("local", "198.18.0.12", 80, st.ThreeEndpoints(), st.WithInternalLocal()),
			nil, "198.18.0.12:80", []string{"198.19.1.10:8080", "198.19.1.11:8080", "198.19.1.10:8080"}},
		{"internalTrafficPolicy Local, none here: untouched", st.Service("remote", "198.18.0.13", 80,
			[]service.Endpoint{st.Endpoint("198.19.1.130:8080", "node-b")}, st.WithInternalLocal()),
			nil, "198.18.0.13:80", []string{"198.18.0.13:80", "198.18.0.13:80", "198.18.0.13:80"}},
		{"no ready endpoint: the serving terminating ones", st.Service("draining", "198.18.0.14", 80, []service.Endpoint{
			st.Terminating(st.Endpoint("198.19.1.10:8080", st.ThisNode)), {Addr: ap("198.19.1.11:8080"), NodeName: st.ThisNode}}),
			nil, "198.18.0.14:80", []string{"198.19.1.10:8080", "198.19.1.10:8080", "198.19.1.10:8080"}},
		{"zone hints, this node in zone-b", st.Service("hinted", "198.18.0.15", 80, st.HintedEndpoints(false)),
			st.InZone("zone-b"), "198.18.0.15:80", []string{"198.19.1.11:8080", "198.19.1.130:8080", "198.19.1.11:8080"}},
		{"zone hints, this node in no zone: all", st.Service("hinted", "198.18.0.15", 80, st.HintedEndpoints(false)),
			nil, "198.18.0.15:80", three},
		{"dual-stack, over IPv4", st.Service("dual", "198.18.0.16", 80, dualEndpoints(), st.WithDualStack("2001:db8:18::16")),
			nil, "198.18.0.16:80", []string{"198.19.1.10:8080", "198.19.1.11:8080", "198.19.1.10:8080"}},
		{"other port of the ClusterIP: untouched", st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()),
			nil, "198.18.0.10:443", []string{"198.18.0.10:443", "198.18.0.10:443", "198.18.0.10:443"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := ksocklb.NewFake()
			p := newMaps(t, Config{LB: lb})
			snap := st.Snapshot(tt.svc)
			snap = snap.With(service.WithNode(tt.node))
			mustSync(t, p, snap)
			if got := reach(lb, ksocklb.TCP, tt.dst, 3); tt.svc.Ports[0].Protocol == service.TCP && !slices.Equal(got, tt.want) {
				_, tr := lb.Connect(ksocklb.Client{}, ksocklb.TCP, ap(tt.dst))
				t.Errorf("connect(%s) with random 0, 1, 2 reaches %v, want %v\n%s", tt.dst, got, tt.want, tr)
			}
			if got := reach(lb, ksocklb.UDP, tt.dst, 3); tt.svc.Ports[0].Protocol == service.UDP && !slices.Equal(got, tt.want) {
				t.Errorf("UDP connect(%s) reaches %v, want %v", tt.dst, got, tt.want)
			}
		})
	}
}

// dualEndpoints are two endpoints of each family on this node.
func dualEndpoints() []service.Endpoint {
	return []service.Endpoint{
		st.Endpoint("198.19.1.10:8080", st.ThisNode), st.Endpoint("198.19.1.11:8080", st.ThisNode),
		st.Endpoint("[2001:db8:19::10]:8080", st.ThisNode), st.Endpoint("[2001:db8:19::11]:8080", st.ThisNode),
	}
}

// TestMapsFamilies: a dual-stack node runs one Maps per family over
// one set of maps (the hooks are per cgroup, not per family); each writes and
// deletes only its own family's elements.
func TestMapsFamilies(t *testing.T) {
	lb := ksocklb.NewFake()
	p4 := newMaps(t, Config{LB: lb, Node: dataplane.Node{Family: service.IPv4}})
	p6 := newMaps(t, Config{LB: lb, Node: dataplane.Node{Family: service.IPv6}})
	dual := st.Service("dual", "198.18.0.16", 80, dualEndpoints(), st.WithDualStack("2001:db8:18::16"))
	snap := st.Snapshot(dual)
	mustSync(t, p4, snap)
	mustSync(t, p6, snap)
	if got, want := reach(lb, ksocklb.TCP, "[2001:db8:18::16]:80", 2), []string{"[2001:db8:19::10]:8080", "[2001:db8:19::11]:8080"}; !slices.Equal(got, want) {
		t.Errorf("connect6 to the IPv6 ClusterIP reaches %v, want %v", got, want)
	}
	if got, want := reach(lb, ksocklb.TCP, "198.18.0.16:80", 2), []string{"198.19.1.10:8080", "198.19.1.11:8080"}; !slices.Equal(got, want) {
		t.Errorf("connect4 to the IPv4 ClusterIP reaches %v, want %v", got, want)
	}
	// The IPv6 Maps' first sync read the maps, IPv4 element included,
	// and left it: another family's element is not its to delete.
	mustSync(t, p6, st.Snapshot())
	if got, want := reach(lb, ksocklb.TCP, "[2001:db8:18::16]:80", 1), []string{"[2001:db8:18::16]:80"}; !slices.Equal(got, want) {
		t.Errorf("after the IPv6 Maps synced no Service, connect6 reaches %v, want %v (untouched)", got, want)
	}
	if got, want := reach(lb, ksocklb.TCP, "198.18.0.16:80", 1), []string{"198.19.1.10:8080"}; !slices.Equal(got, want) {
		t.Errorf("after the IPv6 Maps synced no Service, connect4 reaches %v, want %v (IPv4 untouched)", got, want)
	}
}

// TestMapsPerElement: a sync writes only the elements that changed,
// never the whole map: one SetService for a Service whose endpoints changed,
// one DeleteService for a Service gone, nothing for a Snapshot equal to the
// last.
func TestMapsPerElement(t *testing.T) {
	lb := newRecordingLB()
	p := newMaps(t, Config{LB: lb})
	web := st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints())
	api := st.Service("api", "198.18.0.11", 443, st.ThreeEndpoints()[:1])
	db := st.Service("db", "198.18.0.12", 5432, nil)
	steps := []struct {
		name string
		snap *service.Snapshot
		want []string
	}{
		{"first sync: every Service", st.Snapshot(web, api, db), []string{
			"set 198.18.0.10:80/TCP [198.19.1.10:8080 198.19.1.11:8080 198.19.1.130:8080]",
			"set 198.18.0.11:443/TCP [198.19.1.10:8080]",
			"set 198.18.0.12:5432/TCP []",
		}},
		{"the same Services again: nothing", st.Snapshot(web, api, db), nil},
		{"api gains an endpoint: api only", st.Snapshot(web, st.Service("api", "198.18.0.11", 443, st.ThreeEndpoints()[:2]), db), []string{
			"set 198.18.0.11:443/TCP [198.19.1.10:8080 198.19.1.11:8080]",
		}},
		{"db gone: one delete", st.Snapshot(web, st.Service("api", "198.18.0.11", 443, st.ThreeEndpoints()[:2])), []string{
			"delete 198.18.0.12:5432/TCP",
		}},
		{"web gets ClientIP affinity: web only", st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithAffinity(30*time.Second)),
			st.Service("api", "198.18.0.11", 443, st.ThreeEndpoints()[:2])), []string{
			"set 198.18.0.10:80/TCP [198.19.1.10:8080 198.19.1.11:8080 198.19.1.130:8080]",
		}},
	}
	for _, s := range steps {
		mustSync(t, p, s.snap)
		if got := lb.take(); !slices.Equal(got, s.want) {
			t.Errorf("%s: map updates\n  %s\nwant\n  %s", s.name, strings.Join(got, "\n  "), strings.Join(s.want, "\n  "))
		}
	}
	got, err := lb.Services(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if e := got[ksocklb.Service{VIP: netip.MustParseAddr("198.18.0.10"), Port: 80, Protocol: ksocklb.TCP}]; e.AffinityTimeout != 30*time.Second {
		t.Errorf("web's affinity timeout in the maps is %s, want the Service's 30s", e.AffinityTimeout)
	}
	if h := p.Health(); h.Sets != 5 || h.Deletes != 1 || h.Elements != 2 || !h.Healthy {
		t.Errorf("health %+v, want 5 sets, 1 delete, 2 elements, healthy", h)
	}
}

// TestMapsAdopt: Maps that starts over maps a previous svcproxy left
// (pinned in bpffs) writes only what changed meanwhile: an unchanged Service
// keeps its element, a changed one is set, one gone is deleted.
func TestMapsAdopt(t *testing.T) {
	lb := newRecordingLB()
	web := st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints())
	old := newMaps(t, Config{LB: lb})
	mustSync(t, old, st.Snapshot(web, st.Service("gone", "198.18.0.11", 80, st.ThreeEndpoints()),
		st.Service("api", "198.18.0.12", 80, st.ThreeEndpoints()[:1])))
	lb.take()

	p := newMaps(t, Config{LB: lb})
	mustSync(t, p, st.Snapshot(web, st.Service("api", "198.18.0.12", 80, st.ThreeEndpoints()[1:2])))
	want := []string{"delete 198.18.0.11:80/TCP", "set 198.18.0.12:80/TCP [198.19.1.11:8080]"} // in the order of their keys
	if got := lb.take(); !slices.Equal(got, want) {
		t.Errorf("the new Maps' first sync wrote\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestMapsRepair: another program deletes an element and changes one;
// the next sync after Config.CheckPeriod reads the maps, puts both back and
// counts one repair. Before the period, a sync trusts what it wrote.
func TestMapsRepair(t *testing.T) {
	ctx := context.Background()
	lb := ksocklb.NewFake()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newMaps(t, Config{LB: lb, CheckPeriod: time.Minute, Now: func() time.Time { return now }})
	snap := st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()), st.Service("api", "198.18.0.11", 80, st.ThreeEndpoints()))
	mustSync(t, p, snap)

	web := ksocklb.Service{VIP: netip.MustParseAddr("198.18.0.10"), Port: 80, Protocol: ksocklb.TCP}
	api := ksocklb.Service{VIP: netip.MustParseAddr("198.18.0.11"), Port: 80, Protocol: ksocklb.TCP}
	if err := lb.DeleteService(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := lb.SetService(ctx, api, ksocklb.Entry{Backends: []netip.AddrPort{ap("198.19.9.9:80")}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Second)
	mustSync(t, p, snap)
	if got := reach(lb, ksocklb.TCP, "198.18.0.10:80", 1); got[0] != "198.18.0.10:80" {
		t.Fatalf("before the check period, web's connect() reaches %s: the sync should not have read the maps", got[0])
	}
	now = now.Add(30 * time.Second)
	mustSync(t, p, snap)
	for _, dst := range []string{"198.18.0.10:80", "198.18.0.11:80"} {
		if got, want := reach(lb, ksocklb.TCP, dst, 3), []string{"198.19.1.10:8080", "198.19.1.11:8080", "198.19.1.130:8080"}; !slices.Equal(got, want) {
			t.Errorf("after the check, connect(%s) reaches %v, want %v", dst, got, want)
		}
	}
	h := p.Health()
	if h.Repairs != 1 || h.Checks != 2 || !strings.Contains(h.LastRepair, "198.18.0.10:80/TCP missing") || !strings.Contains(h.LastRepair, "198.18.0.11:80/TCP changed") {
		t.Errorf("health: %d repairs, %d checks, last %q; want 1 repair naming both elements, 2 checks", h.Repairs, h.Checks, h.LastRepair)
	}
}

// TestMapsCarries: hybrid mode's Carries puts only the promoted ports in
// the maps; a port no longer included leaves them.
func TestMapsCarries(t *testing.T) {
	lb := ksocklb.NewFake()
	promoted := map[string]bool{"web": true}
	p := newMaps(t, Config{LB: lb, Carries: func(n service.PortName) bool { return promoted[n.Name] }})
	snap := st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()), st.Service("api", "198.18.0.11", 80, st.ThreeEndpoints()))
	mustSync(t, p, snap)
	if got := reach(lb, ksocklb.TCP, "198.18.0.11:80", 1); got[0] != "198.18.0.11:80" {
		t.Errorf("api, not promoted, reaches %s; want untouched", got[0])
	}
	if got := reach(lb, ksocklb.TCP, "198.18.0.10:80", 1); got[0] != "198.19.1.10:8080" {
		t.Errorf("web, promoted, reaches %s; want 198.19.1.10:8080", got[0])
	}
	promoted = map[string]bool{"api": true}
	mustSync(t, p, snap)
	if got := reach(lb, ksocklb.TCP, "198.18.0.10:80", 1); got[0] != "198.18.0.10:80" {
		t.Errorf("web, demoted, reaches %s; want untouched", got[0])
	}
	if got := reach(lb, ksocklb.TCP, "198.18.0.11:80", 1); got[0] != "198.19.1.10:8080" {
		t.Errorf("api, promoted, reaches %s; want 198.19.1.10:8080", got[0])
	}
}

// TestMapsStatus: /status shows each port on path "socklb" with its
// frontends, backends and affinity.
func TestMapsStatus(t *testing.T) {
	p := newMaps(t, Config{LB: ksocklb.NewFake()})
	mustSync(t, p, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:2], st.WithAffinity(time.Minute))))
	got := p.Status()
	want := []PortStatus{{Port: "default/web:p", Protocol: "TCP", Path: "socklb", Frontends: []string{"198.18.0.10:80"},
		Backends: []string{"198.19.1.10:8080", "198.19.1.11:8080"}, Affinity: "1m0s"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("status %+v, want %+v", got, want)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "LB is nil"},
		{Config{LB: ksocklb.NewFake(), Node: dataplane.Node{Family: "IPv5"}}, `Family "IPv5"`},
	} {
		if _, err := NewMaps(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewMaps(%+v): %v, want an error with %q", tt.cfg, err, tt.want)
		}
	}
}

// TestMapsEveryField: a sync keeps a port's elements while
// service.Port.RendersSameAs says the port renders the same; after a change
// of any one field of a port (servicetest.Variants), the maps and the status
// must be what new Maps' first sync writes.
func TestMapsEveryField(t *testing.T) {
	st.CheckPartialSyncs(t, func(t *testing.T) st.Path {
		fp := &fakePath{lb: ksocklb.NewFake()}
		fp.Restart(t)
		return fp
	}, nil)
}

// fakePath is Maps on a Fake, as servicetest's checks drive it.
type fakePath struct {
	lb *ksocklb.Fake
	p  *Maps
}

func (fp *fakePath) Restart(t *testing.T)                      { fp.p = newMaps(t, Config{LB: fp.lb}) }
func (fp *fakePath) Sync(t *testing.T, snap *service.Snapshot) { mustSync(t, fp.p, snap) }

func (fp *fakePath) State(t *testing.T) string {
	elements, err := fp.lb.Services(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for svc, e := range elements {
		lines = append(lines, fmt.Sprintf("%s -> %v affinity %s", svc, e.Backends, e.AffinityTimeout))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + fmt.Sprintf("\n%+v", fp.p.Status())
}
