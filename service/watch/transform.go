package watch

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// annotationPrefix marks the only annotations svcproxy reads (for example
// svcproxy.io/ipvs-scheduler); the others are dropped before caching.
const annotationPrefix = "svcproxy.io/"

// trim drops what neither the proxy nor the DNS reads from an object before it
// is cached: managed fields, owner references, the UID, foreign annotations and
// labels, a Service's selector, Endpoint target references, hints and
// deprecated topology, a Service's status beyond its load-balancer IPs. In a real cluster managedFields alone are often half
// of an object. It is the informers' transform (client-go SetTransform); a
// manifests file's objects are not kept, so they need none. It modifies obj,
// which the caller owns, and returns it.
func trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1.Service:
		trimMeta(&o.ObjectMeta)
		// Endpoints come from EndpointSlices: the selector and the labels
		// are the API server's business, not the proxy's.
		o.Labels, o.Spec.Selector = nil, nil
		var ingress []v1.LoadBalancerIngress
		for _, in := range o.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				ingress = append(ingress, v1.LoadBalancerIngress{IP: in.IP})
			}
		}
		o.Status = v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: ingress}}
	case *discoveryv1.EndpointSlice:
		trimMeta(&o.ObjectMeta)
		// Only the label that ties a slice to its Service is read.
		name, ok := o.Labels[discoveryv1.LabelServiceName]
		o.Labels = nil
		if ok {
			o.Labels = map[string]string{discoveryv1.LabelServiceName: name}
		}
		for i := range o.Endpoints {
			e := &o.Endpoints[i]
			e.TargetRef, e.DeprecatedTopology, e.Hints = nil, nil, nil
		}
	case *v1.Endpoints:
		trimMeta(&o.ObjectMeta)
		o.Labels = nil
		for i := range o.Subsets {
			ss := &o.Subsets[i]
			for j := range ss.Addresses {
				ss.Addresses[j].TargetRef = nil
			}
			for j := range ss.NotReadyAddresses {
				ss.NotReadyAddresses[j].TargetRef = nil
			}
		}
	}
	return obj, nil
}

func trimMeta(m *metav1.ObjectMeta) {
	m.ManagedFields = nil
	m.OwnerReferences = nil
	m.GenerateName = ""
	m.Finalizers = nil
	m.UID = ""
	var keep map[string]string
	for k, v := range m.Annotations {
		if strings.HasPrefix(k, annotationPrefix) {
			if keep == nil {
				keep = make(map[string]string)
			}
			keep[k] = v
		}
	}
	m.Annotations = keep
}
