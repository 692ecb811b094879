package manifestgen_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/internal/manifestgen"
	"github.com/svcproxy/svcproxy/service/watch"
)

// TestList: the List loads as the manifests file it is, without an error:
// each Service with its ClusterIP, followed by its EndpointSlice of two ready
// endpoints.
func TestList(t *testing.T) {
	data, err := manifestgen.List(300)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := watch.LoadManifests("list.json", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 600 {
		t.Fatalf("%d objects, want 600", len(objs))
	}
	name, ns := manifestgen.Name(299)
	svc, ok := objs[598].(*v1.Service)
	if !ok || svc.Name != name || svc.Namespace != ns || svc.Spec.ClusterIP != "198.18.1.45" {
		t.Errorf("object 598 = %#v, want Service %s/%s at 198.18.1.45 (299 + 2)", objs[598], ns, name)
	}
	es, ok := objs[599].(*discoveryv1.EndpointSlice)
	if !ok || es.Namespace != ns || es.Labels[discoveryv1.LabelServiceName] != name || len(es.Endpoints) != 2 {
		t.Errorf("object 599 = %#v, want an EndpointSlice of %s/%s with two endpoints", objs[599], ns, name)
	}
	if _, err := manifestgen.List(65001); err == nil {
		t.Error("List(65001): no error; 198.18.0.0/16 cannot hold so many")
	}
}
