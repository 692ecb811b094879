package service

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestJoinKeepsObjects joins the same converted Service with two versions of
// its slice, as a watcher does after a change: each Snapshot has its own
// endpoints, and the converted objects stay as they were (a watcher keeps
// them for the next Join).
func TestJoinKeepsObjects(t *testing.T) {
	web := ConvertService(svc("web"))
	one := ConvertSlice(slice("web-1", "web", []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}, ep("198.19.0.1", true)))
	two := ConvertSlice(slice("web-1", "web", []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}, ep("198.19.0.2", true), ep("198.19.0.3", false)))

	first := Join([]*ServiceObject{web}, []*SliceObject{one}, nil)
	second := Join([]*ServiceObject{web}, []*SliceObject{two}, nil)
	endpoints := func(s *Snapshot) []string {
		var out []string
		for _, e := range s.Services()[0].Ports[0].Endpoints {
			out = append(out, e.String())
		}
		return out
	}
	if got := endpoints(first); len(got) != 1 || got[0] != "198.19.0.1:8080" {
		t.Errorf("first Snapshot: endpoints %v, want [198.19.0.1:8080]", got)
	}
	if got := endpoints(second); len(got) != 2 || got[0] != "198.19.0.2:8080" || got[1] != "198.19.0.3:8080" {
		t.Errorf("second Snapshot: endpoints %v, want [198.19.0.2:8080 198.19.0.3:8080]", got)
	}
	if first.Services()[0] == second.Services()[0] {
		t.Error("two Snapshots share a Service")
	}
	if p := second.Services()[0].Ports[0]; p.Service != second.Services()[0] {
		t.Error("a port's Service is not the Service that holds it")
	}
	if len(web.svc.Endpoints) != 0 || len(web.svc.Ports[0].Endpoints) != 0 {
		t.Errorf("the converted Service got endpoints: %v, %v", web.svc.Endpoints, web.svc.Ports[0].Endpoints)
	}
}

// TestConvertErrors: an invalid object keeps its error, Join reports it and
// leaves the object out.
func TestConvertErrors(t *testing.T) {
	bad := ConvertService(svc("bad", func(s *v1.Service) { s.Spec.ClusterIP = "999.1.1.1" }))
	if bad.Err() == nil || bad.Name() != (NamespacedName{Namespace: "default", Name: "bad"}) {
		t.Fatalf("ConvertService: err %v, name %v", bad.Err(), bad.Name())
	}
	snap := Join([]*ServiceObject{bad, ConvertService(svc("web"))}, nil, nil)
	if snap.Len() != 1 || len(snap.Errors()) != 1 || snap.Errors()[0].Error() != bad.Err().Error() {
		t.Errorf("Join: %d Services, errors %v; want 1 and %v", snap.Len(), snap.Errors(), bad.Err())
	}
}
