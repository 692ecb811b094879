package dataplane

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/service"
)

// stubMode is a mode built on a Syncer that records what it applied.
type stubMode struct {
	*Syncer
	a *applier
}

func newStubMode(fail int) *stubMode {
	a := &applier{fail: fail, calls: make(chan error, 16)}
	return &stubMode{Syncer: NewSyncer(SyncerConfig{Mode: "test", Apply: a.apply}), a: a}
}

func (m *stubMode) Mode() string { return "test" }
func (m *stubMode) Status() any  { return map[string]int{"applied": len(m.a.applied)} }

// dualStackSnapshot has web with a ClusterIP and an endpoint of each family,
// and v6only with one IPv6 ClusterIP.
func dualStackSnapshot() *service.Snapshot {
	mk := func(name string, ips []string, eps ...string) *service.Service {
		s := &service.Service{NamespacedName: service.NamespacedName{Namespace: "default", Name: name}, Type: service.TypeClusterIP}
		for _, ip := range ips {
			s.ClusterIPs = append(s.ClusterIPs, netip.MustParseAddr(ip))
		}
		p := &service.Port{Name: service.PortName{NamespacedName: s.NamespacedName, Port: "http", Protocol: service.TCP},
			Service: s, Port: 80, Protocol: service.TCP}
		for _, e := range eps {
			p.Endpoints = append(p.Endpoints, service.Endpoint{Addr: netip.MustParseAddrPort(e), Ready: true, Serving: true})
		}
		s.Ports = []*service.Port{p}
		return s
	}
	return service.NewSnapshot([]*service.Service{
		mk("web", []string{"198.18.0.10", "2001:db8:18::10"}, "198.19.1.2:8080", "[2001:db8:19::2]:8080"),
		mk("v6only", []string{"2001:db8:18::20"}, "[2001:db8:19::3]:8080"),
	}, nil)
}

// Each family's dataplane gets its view of the Snapshot; a failure in one is
// named by its family, and the other family is served all the same.
func TestFamiliesSync(t *testing.T) {
	v4, v6 := newStubMode(0), newStubMode(1)
	f, err := NewFamilies(v4, v6)
	if err != nil {
		t.Fatal(err)
	}
	snap := dualStackSnapshot()
	err = f.Sync(context.Background(), snap)
	if err == nil || !strings.HasPrefix(err.Error(), "IPv6: ") {
		t.Fatalf("Sync = %v, want IPv6's failure, named", err)
	}
	if len(v4.a.applied) != 1 || v4.a.applied[0] != snap.Family(service.IPv4) {
		t.Fatalf("IPv4 applied %v, want the IPv4 view", v4.a.applied)
	}
	if got := v4.a.applied[0].Len(); got != 1 {
		t.Errorf("IPv4 view: %d Services, want web only", got)
	}
	if err := f.Healthy(); err == nil || !strings.Contains(err.Error(), "IPv6: ") || strings.Contains(err.Error(), "IPv4") {
		t.Errorf("Healthy = %v, want IPv6 unhealthy only", err)
	}
	if err := f.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	if len(v6.a.applied) != 1 || v6.a.applied[0].Len() != 2 {
		t.Fatalf("IPv6 applied %v, want its view: web and v6only", v6.a.applied)
	}
	if err := f.Healthy(); err != nil {
		t.Errorf("Healthy after both synced: %v", err)
	}
	b, _ := json.Marshal(f.Status())
	if want := `{"IPv4":{"applied":2},"IPv6":{"applied":1},"ipFamilies":["IPv4","IPv6"],"mode":"test"}`; string(b) != want {
		t.Errorf("Status = %s, want %s", b, want)
	}
}

// Both families' metrics are in one registry, told apart by ip_family.
func TestFamiliesMetrics(t *testing.T) {
	v4, v6 := newStubMode(0), newStubMode(0)
	f, _ := NewFamilies(v4, v6)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(f); err != nil {
		t.Fatal(err)
	}
	_ = f.Sync(context.Background(), dualStackSnapshot())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range fams {
		if mf.GetName() == "kubeproxy_sync_proxy_rules_duration_seconds" && len(mf.GetMetric()) != 2 {
			t.Errorf("%s: %d series, want one per family", mf.GetName(), len(mf.GetMetric()))
		}
		for _, m := range mf.GetMetric() {
			has := false
			for _, l := range m.GetLabel() {
				has = has || (l.GetName() == "ip_family" && (l.GetValue() == "IPv4" || l.GetValue() == "IPv6"))
			}
			if !has {
				t.Errorf("%s %v: no ip_family label", mf.GetName(), m.GetLabel())
			}
		}
	}
}

func TestNewFamilies(t *testing.T) {
	if _, err := NewFamilies(nil, nil); err == nil {
		t.Error("no family: want an error")
	}
	f, err := NewFamilies(nil, newStubMode(0))
	if err != nil {
		t.Fatal(err)
	}
	if fams := f.IPFamilies(); len(fams) != 1 || fams[0] != service.IPv6 || f.Family(service.IPv4) != nil {
		t.Errorf("IPv6 only: families %v", fams)
	}
	// One family: errors are the family's own, not prefixed.
	g, _ := NewFamilies(newStubMode(1), nil)
	if err := g.Sync(context.Background(), dualStackSnapshot()); err == nil || strings.Contains(err.Error(), "IPv4:") {
		t.Errorf("single family: Sync = %v, want the mode's own error", err)
	}
}

// fullMode is a stubMode that counts its syncs as full ones.
type fullMode struct {
	*stubMode
	full uint64
}

func (m *fullMode) FullSyncs() uint64 { return m.full }

// FullSyncs is a FullSyncer's count, the families' together, 0 for a mode
// that makes no full syncs.
func TestFullSyncs(t *testing.T) {
	v4, v6 := &fullMode{stubMode: newStubMode(0), full: 2}, &fullMode{stubMode: newStubMode(0), full: 1}
	f, err := NewFamilies(v4, v6)
	if err != nil {
		t.Fatal(err)
	}
	if got := FullSyncs(f); got != 3 {
		t.Errorf("FullSyncs of both families: %d, want 3", got)
	}
	if got := FullSyncs(newStubMode(0)); got != 0 {
		t.Errorf("FullSyncs of a mode without: %d, want 0", got)
	}
}
