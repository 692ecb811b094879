package kernelsync

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

// RenderPorts reuses what is unchanged, renders what changed or is new, and
// names what is gone: the Service deleted, and the one that renders to nothing
// now (it became headless).
func TestRenderPorts(t *testing.T) {
	svc := func(name string, portNum uint16, clusterIP string) *service.Service {
		s := &service.Service{NamespacedName: service.NamespacedName{Namespace: "default", Name: name}, Type: service.TypeClusterIP}
		if clusterIP != "" {
			s.ClusterIPs = []netip.Addr{netip.MustParseAddr(clusterIP)}
		}
		s.Ports = []*service.Port{{Name: service.PortName{NamespacedName: s.NamespacedName, Port: "p", Protocol: service.UDP},
			Service: s, Port: portNum, Protocol: service.UDP}}
		return s
	}
	render := func(p *service.Port) *port {
		if len(p.Service.ClusterIPs) == 0 {
			return nil // headless: nothing to render
		}
		return &port{name: p.Name, from: p, flows: Flows{Protocol: "udp", Port: p.Port, Frontends: p.Service.ClusterIPs}}
	}
	name := func(n string) service.PortName {
		return service.PortName{NamespacedName: service.NamespacedName{Namespace: "default", Name: n}, Port: "p", Protocol: service.UDP}
	}

	first := RenderPorts(service.NewSnapshot([]*service.Service{
		svc("kept", 53, "198.18.0.1"), svc("changed", 53, "198.18.0.2"),
		svc("deleted", 53, "198.18.0.3"), svc("headless", 53, "198.18.0.4"),
	}, nil), nil, nil, render)
	if len(first.All) != 4 || len(first.Changed) != 4 || len(first.Removed) != 0 {
		t.Fatalf("first rendering: %d ports, %d changed, %d removed; want 4, 4, 0", len(first.All), len(first.Changed), len(first.Removed))
	}
	applied := map[service.PortName]*port{}
	for _, p := range first.All {
		applied[p.Name()] = p
	}

	next := RenderPorts(service.NewSnapshot([]*service.Service{
		svc("kept", 53, "198.18.0.1"), svc("changed", 5353, "198.18.0.2"),
		svc("headless", 53, ""), svc("new", 53, "198.18.0.5"), svc("skipped", 53, "198.18.0.6"),
	}, nil), applied, func(n service.PortName) bool { return n.Name != "skipped" }, render)

	if !slices.Contains(next.All, applied[name("kept")]) {
		t.Errorf("the unchanged port was rendered again instead of reused")
	}
	var changed []string
	for _, c := range next.Changed {
		changed = append(changed, c.Cur.Name().Name)
		if want := applied[c.Cur.Name()]; c.Old != want {
			t.Errorf("change of %s: Old %v, want the applied %v", c.Cur.Name(), c.Old, want)
		}
	}
	slices.Sort(changed)
	if want := []string{"changed", "new"}; !slices.Equal(changed, want) {
		t.Errorf("changed %v, want %v", changed, want)
	}
	var removed []string
	for _, r := range next.Removed {
		removed = append(removed, r.Name().Name)
	}
	slices.Sort(removed)
	if want := []string{"deleted", "headless"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	if len(next.All) != 3 {
		t.Errorf("%d ports rendered, want 3 (kept, changed, new; skipped is not included)", len(next.All))
	}

	// This node's zone is part of what a port was rendered from (topology
	// hints): in another zone, the unchanged port is rendered again.
	zoned := service.NewSnapshot([]*service.Service{svc("kept", 53, "198.18.0.1")}, nil)
	zoned = zoned.With(service.WithNode(&service.Node{Name: "node-a", Labels: map[string]string{"topology.kubernetes.io/zone": "zone-b"}}))
	if again := RenderPorts(zoned, applied, nil, render); len(again.Changed) != 1 || again.Changed[0].Old != applied[name("kept")] {
		t.Errorf("in a new zone: changed %v, want kept rendered again", again.Changed)
	}
}
