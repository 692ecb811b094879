package dataplane

import (
	"net/netip"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/svcproxy/svcproxy/service"
)

// kube-proxy's serviceNoLocalEndpointsTotalInternal and ...External: a port
// whose Local policy finds no endpoint on this node while some endpoint is
// usable elsewhere; a port without any usable endpoint is not counted.
func TestNoLocalEndpoints(t *testing.T) {
	remote := service.Endpoint{Addr: netip.MustParseAddrPort("198.19.1.10:8080"), Ready: true, Serving: true, NodeName: "node-b"}
	local := service.Endpoint{Addr: netip.MustParseAddrPort("198.19.1.11:8080"), Ready: true, Serving: true, NodeName: "node-a"}
	cases := []struct {
		name               string
		internal, external bool // the policies Local
		nodePort           uint16
		eps                []service.Endpoint
		wantInt, wantExt   int
	}{
		{"cluster policies", false, false, 30080, []service.Endpoint{remote}, 0, 0},
		{"internal Local, remote endpoint only", true, false, 0, []service.Endpoint{remote}, 1, 0},
		{"internal Local, a local endpoint", true, false, 0, []service.Endpoint{remote, local}, 0, 0},
		{"external Local with a NodePort, remote only", false, true, 30080, []service.Endpoint{remote}, 0, 1},
		{"external Local without external addresses", false, true, 0, []service.Endpoint{remote}, 0, 0},
		{"both Local, remote only", true, true, 30080, []service.Endpoint{remote}, 1, 1},
		{"both Local, no endpoint at all: rejected, not counted", true, true, 30080, nil, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &service.Service{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"},
				Type: service.TypeNodePort, ClusterIPs: []netip.Addr{netip.MustParseAddr("198.18.0.10")},
				InternalPolicyLocal: c.internal, ExternalPolicyLocal: c.external}
			s.Ports = []*service.Port{{Name: service.PortName{NamespacedName: s.NamespacedName, Port: "http", Protocol: service.TCP},
				Service: s, Port: 80, NodePort: c.nodePort, Protocol: service.TCP, Endpoints: c.eps}}
			gotInt, gotExt := NoLocalEndpoints(service.NewSnapshot([]*service.Service{s}, nil), "node-a")
			if gotInt != c.wantInt || gotExt != c.wantExt {
				t.Errorf("internal %d, external %d; want %d, %d", gotInt, gotExt, c.wantInt, c.wantExt)
			}
		})
	}
}

// kubeproxy_network_programming_duration_seconds starts at the EndpointSlice's
// last-change-trigger-time, as kube-proxy's: each slice change is observed
// once, at the sync that applies it; a resync of the same slice, or a trigger
// from before the Record started, is not.
func TestRecordTriggers(t *testing.T) {
	start := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	now := start
	r := NewRecord(RecordConfig{Mode: "test", Now: func() time.Time { return now }})
	snap := func(triggers ...service.Trigger) *service.Snapshot {
		s := &service.Service{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"},
			Type: service.TypeClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("198.18.0.10")}, Triggers: triggers}
		return service.NewSnapshot([]*service.Service{s}, nil)
	}
	sync := func(s *service.Snapshot) {
		r.Queued()
		r.End(r.Begin(s), nil)
	}
	old := service.Trigger{Slice: "web-1", Family: service.IPv4, At: start.Add(-time.Minute)}
	sync(snap(old)) // before the Record started: not this process's change
	changed := service.Trigger{Slice: "web-1", Family: service.IPv4, At: start.Add(time.Second)}
	now = start.Add(3 * time.Second)
	sync(snap(changed)) // 2s after its trigger
	now = start.Add(30 * time.Second)
	sync(snap(changed)) // a resync: the same change
	var m dto.Metric
	if err := r.programming.Write(&m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 2 {
		t.Errorf("network programming: %d samples, sum %v; want one of 2s", h.GetSampleCount(), h.GetSampleSum())
	}
	if err := r.applied.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetHistogram().GetSampleCount(); n != 3 {
		t.Errorf("svcproxy_snapshot_programming_duration_seconds: %d samples, want 3 (every applied handover)", n)
	}
}
