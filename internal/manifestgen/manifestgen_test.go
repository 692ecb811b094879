package manifestgen_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/internal/manifestgen"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// TestList: the List loads as the manifests file it is, each Service with its
// ClusterIP and two ready endpoints.
func TestList(t *testing.T) {
	data, err := manifestgen.List(300)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := watch.LoadManifests("list.json", data)
	if err != nil {
		t.Fatal(err)
	}
	var svcs []*v1.Service
	var slices []*discoveryv1.EndpointSlice
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.Service:
			svcs = append(svcs, o)
		case *discoveryv1.EndpointSlice:
			slices = append(slices, o)
		}
	}
	snap := service.Build(svcs, slices, nil)
	if snap.Len() != 300 || len(snap.Errors()) != 0 {
		t.Fatalf("%d Services, errors %v; want 300, none", snap.Len(), snap.Errors())
	}
	name, ns := manifestgen.Name(299)
	svc, ok := snap.Service(service.NamespacedName{Namespace: ns, Name: name})
	if !ok {
		t.Fatalf("no Service %s/%s", ns, name)
	}
	if got := svc.ClusterIPs[0].String(); got != "198.18.1.45" {
		t.Errorf("%s/%s: ClusterIP %s, want 198.18.1.45 (299 + 2)", ns, name, got)
	}
	if eps := svc.Ports[0].Endpoints; len(eps) != 2 {
		t.Errorf("%s/%s: %d endpoints, want 2", ns, name, len(eps))
	}
	if _, err := manifestgen.List(65001); err == nil {
		t.Error("List(65001): no error; 198.18.0.0/16 cannot hold so many")
	}
}
