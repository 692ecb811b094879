package watch

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// DNSSnapshotOf is SnapshotOf with what clusterdns reads beside Services: the
// Snapshot carries the file's namespaces and its pods' addresses, as a
// Watcher with Config.Namespaces and Config.Pods builds it.
func DNSSnapshotOf(name string, data []byte) (*service.Snapshot, error) {
	objs, err := LoadManifests(name, data)
	if !onlyUnsupported(err) {
		return nil, err
	}
	return build(objs, selection{namespaces: true, pods: true}), err
}

// build is the Snapshot of objs (Services, EndpointSlices, v1 Endpoints and
// this node's Node; Namespaces and Pods when sel asks for them; anything else
// is ignored): what a manifests file describes, as sel selects it
// (select.go).
//
// A file's namespaces are those its Namespace documents name and those its
// other objects are in: a lab's file rarely lists its namespaces, and the
// namespace of a Service it holds exists in any cluster that has the
// Service.
func build(objs []runtime.Object, sel selection) *service.Snapshot {
	var (
		svcs       []*v1.Service
		slices     []*discoveryv1.EndpointSlice
		endpoints  []*v1.Endpoints
		node       *service.Node
		namespaces = service.Namespaces{}
		pods       = service.PodIPs{}
	)
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok && m.GetNamespace() != "" {
			namespaces[m.GetNamespace()] = struct{}{}
		}
		switch o := o.(type) {
		case *v1.Namespace:
			namespaces[o.Name] = struct{}{}
		case *v1.Pod:
			if ip, ok := service.PodIP(o); ok {
				pods[ip] = append(pods[ip], o.Namespace)
			}
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
	opts := []service.SnapshotOption{service.WithNode(node)}
	if sel.namespaces {
		opts = append(opts, service.WithNamespaces(namespaces))
	}
	if sel.pods {
		opts = append(opts, service.WithPodIPs(pods))
	}
	return service.Build(svcs, slices, endpoints, opts...)
}
