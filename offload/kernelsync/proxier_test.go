package kernelsync

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/service"
)

// port is a rendered port of the test mode: a name and its flows.
type port struct {
	name  service.PortName
	flows Flows
}

func (p *port) Name() service.PortName { return p.name }
func (p *port) Flows() *Flows          { return &p.flows }

type rendering struct {
	ports, removed []*port
	changed        []Change[*port]
}

func (r *rendering) Ports() []*port           { return r.ports }
func (r *rendering) Changed() []Change[*port] { return r.changed }
func (r *rendering) Removed() []*port         { return r.removed }

// mode renders one UDP port per Service, endpoints from the Snapshot, and
// records how each sync was written; fail fails the next Apply.
type mode struct {
	fail   bool
	writes []string // "full" or "partial", per Apply
}

func (m *mode) Render(snap *service.Snapshot, applied map[service.PortName]*port, _ bool) *rendering {
	r := &rendering{}
	here := map[service.PortName]bool{}
	for _, p := range snap.Ports() {
		cur := &port{name: p.Name, flows: Flows{Protocol: "udp", Port: p.Port, Frontends: p.Service.ClusterIPs, HasEndpoints: len(p.Endpoints) > 0}}
		for _, e := range p.Endpoints {
			cur.flows.Endpoints = append(cur.flows.Endpoints, e.Addr.Addr())
		}
		slices.SortFunc(cur.flows.Endpoints, netip.Addr.Compare)
		r.ports = append(r.ports, cur)
		r.changed = append(r.changed, Change[*port]{Old: applied[p.Name], Cur: cur})
		here[p.Name] = true
	}
	for name, old := range applied {
		if !here[name] {
			r.removed = append(r.removed, old)
		}
	}
	return r
}

func (m *mode) Apply(_ context.Context, r *rendering, _ map[service.PortName]*port, full bool) (int, error) {
	if m.fail {
		m.fail = false
		return 0, errors.New("restore failed")
	}
	m.writes = append(m.writes, map[bool]string{true: "full", false: "partial"}[full])
	return len(r.ports), nil
}

func (m *mode) Commit(*rendering, map[service.PortName]*port) {}

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

// A sync is full at first, after a failure and a SyncPeriod after the last full
// one ended; partial otherwise. Nothing is synced before the first Update, and
// the first sync deletes no conntrack entry (it adopts what it finds).
func TestProxierSyncs(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &mode{}
	ct := conntrack.NewFake()
	p := New(Config{Conntrack: ct, SyncPeriod: time.Minute, Now: func() time.Time { return now }}, m)
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
	_ = step(udpService("198.19.1.2:53"), time.Second)    // full: SyncPeriod since then
	if want := []string{"full", "partial", "full", "partial", "full"}; !slices.Equal(m.writes, want) {
		t.Errorf("syncs %v, want %v", m.writes, want)
	}
	h := p.Health()
	if !h.Healthy || h.FullSyncs != 3 || h.PartialSyncs != 2 || h.Failures != 1 || h.Size != 1 {
		t.Errorf("health %+v", h)
	}
	want := []conntrack.Filter{{Protocol: "udp", OrigDst: netip.MustParseAddr("198.18.0.53"), OrigDstPort: 53, DstNAT: netip.MustParseAddr("198.19.1.3")}}
	if got := ct.Deletes(); !slices.Equal(got, want) || h.ConntrackDeleted != 0 {
		t.Errorf("conntrack deletes %v, want %v (the endpoint that left, not the first sync's)", got, want)
	}
}

func TestStaleFlows(t *testing.T) {
	vip, ep1, ep2 := netip.MustParseAddr("198.18.0.53"), netip.MustParseAddr("198.19.1.2"), netip.MustParseAddr("198.19.1.3")
	mk := func(proto string, eps ...netip.Addr) *port {
		return &port{flows: Flows{Protocol: proto, Port: 53, NodePort: 30053, Frontends: []netip.Addr{vip}, Endpoints: eps, HasEndpoints: len(eps) > 0}}
	}
	for _, tt := range []struct {
		name    string
		changed []Change[*port]
		removed []*port
		want    []conntrack.Filter
	}{
		{"an endpoint leaves", []Change[*port]{{Old: mk("udp", ep1, ep2), Cur: mk("udp", ep1)}}, nil, []conntrack.Filter{
			{Protocol: "udp", OrigDstPort: 30053, DstNAT: ep2},
			{Protocol: "udp", OrigDst: vip, OrigDstPort: 53, DstNAT: ep2}}},
		{"first endpoints", []Change[*port]{{Old: mk("udp"), Cur: mk("udp", ep1)}}, nil, []conntrack.Filter{
			{Protocol: "udp", OrigDstPort: 30053},
			{Protocol: "udp", OrigDst: vip, OrigDstPort: 53}}},
		{"a new port with endpoints", []Change[*port]{{Cur: mk("udp", ep1)}}, nil, []conntrack.Filter{
			{Protocol: "udp", OrigDstPort: 30053},
			{Protocol: "udp", OrigDst: vip, OrigDstPort: 53}}},
		{"a port removed", nil, []*port{mk("udp", ep1)}, []conntrack.Filter{
			{Protocol: "udp", OrigDstPort: 30053, DstNAT: ep1},
			{Protocol: "udp", OrigDst: vip, OrigDstPort: 53, DstNAT: ep1}}},
		{"TCP: nothing", []Change[*port]{{Old: mk("tcp", ep1, ep2), Cur: mk("tcp")}}, []*port{mk("tcp", ep1)}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := StaleFlows(tt.changed, tt.removed); !slices.Equal(got, tt.want) {
				t.Errorf("StaleFlows = %v\nwant %v", got, tt.want)
			}
		})
	}
}
