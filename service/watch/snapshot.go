package watch

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/svcproxy/svcproxy/service"
)

// SnapshotOf is the Snapshot a manifests file describes, at once, without a
// Watcher: LoadManifests, then service.Build. It is for tools that read a file
// once (svclab's rules and trace) and for examples; the error is
// LoadManifests'. Documents of unsupported kinds are skipped, as the Watcher
// skips them, and the Snapshot is built from the rest.
func SnapshotOf(name string, data []byte) (*service.Snapshot, error) {
	objs, err := LoadManifests(name, data)
	if !onlyUnsupported(err) {
		return nil, err
	}
	return build(objs, selection{}), err
}

// build is the Snapshot of objs (Services, EndpointSlices, v1 Endpoints and
// this node's Node; anything else is ignored): what a manifests file
// describes, as sel selects it (select.go).
func build(objs []runtime.Object, sel selection) *service.Snapshot {
	var (
		svcs      []*v1.Service
		slices    []*discoveryv1.EndpointSlice
		endpoints []*v1.Endpoints
		node      *service.Node
	)
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.Node:
			if sel.nodeName != "" && o.Name == sel.nodeName {
				node = service.ConvertNode(o)
			}
		case *v1.Service:
			if sel.service(o) {
				svcs = append(svcs, o)
			}
		case *discoveryv1.EndpointSlice:
			if sel.slice(o) {
				slices = append(slices, o)
			}
		case *v1.Endpoints:
			if sel.endpoints(o) {
				endpoints = append(endpoints, o)
			}
		}
	}
	return service.Build(svcs, slices, endpoints, service.WithNode(node))
}
