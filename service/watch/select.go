package watch

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apifields "k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	apiselection "k8s.io/apimachinery/pkg/selection"
)

// LabelServiceProxyName is the label by which a Service names the proxy that
// serves it: a Service that has it, whatever its value, is another proxy's,
// and kube-proxy leaves it alone (KEP-2447's service-proxy-name; kube-proxy's
// constant is apis.LabelServiceProxyName, k8s.io/kubernetes pkg/proxy/apis).
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// selection says what goes into a Snapshot, as the Watcher's Config says it.
// From the API server it is the informers' list options (the server
// selects); from a manifests file, build applies the same rules.
type selection struct {
	// nodeName is Config.NodeName: the Node of that name is this node's, the
	// Snapshot's Node; other Nodes are ignored.
	nodeName string
	// proxiedOnly is Config.ProxiedOnly: leave out what a service proxy
	// does not serve (kube-proxy's selectors, below).
	proxiedOnly bool
	// namespaces and pods are Config.Namespaces and Config.Pods: the
	// Snapshot carries the namespaces, and the pods' addresses.
	namespaces, pods bool
}

// kube-proxy's selectors, as ProxyServer.Run (k8s.io/kubernetes v1.37.2,
// cmd/kube-proxy/app/server.go) sets them on its informer factories'
// list options: Services without the service-proxy-name label and not
// headless (spec.clusterIP!=None, a field selector); EndpointSlices without
// the headless label, which the EndpointSlice controller puts on the slices
// of a headless Service (a DNS name, not a virtual IP: nothing to proxy).
var (
	servicesProxied     = labels.NewSelector().Add(mustRequirement(LabelServiceProxyName)).String()
	servicesNotHeadless = apifields.OneTermNotEqualSelector("spec.clusterIP", v1.ClusterIPNone).String()
	slicesProxied       = labels.NewSelector().Add(mustRequirement(v1.IsHeadlessService)).String()
)

// mustRequirement is "!key": the label key does not exist.
func mustRequirement(key string) labels.Requirement {
	r, err := labels.NewRequirement(key, apiselection.DoesNotExist, nil)
	if err != nil {
		panic(err) // the keys are constants, and valid
	}
	return *r
}

// serviceOptions and sliceOptions are the list options of the Service and
// EndpointSlice informers: kube-proxy's selectors when proxiedOnly, none
// otherwise.
func (s selection) serviceOptions(o *metav1.ListOptions) {
	if s.proxiedOnly {
		o.LabelSelector, o.FieldSelector = servicesProxied, servicesNotHeadless
	}
}

func (s selection) sliceOptions(o *metav1.ListOptions) {
	if s.proxiedOnly {
		o.LabelSelector = slicesProxied
	}
}

// The same rules for the objects of a manifests file, which no server
// selects. v1 Endpoints, which kube-proxy does not read, follow the
// slices' rule: the Endpoints controller labels a headless Service's
// Endpoints as the EndpointSlice controller labels its slices.

func (s selection) service(svc *v1.Service) bool {
	if !s.proxiedOnly {
		return true
	}
	_, other := svc.Labels[LabelServiceProxyName]
	return !other && svc.Spec.ClusterIP != v1.ClusterIPNone
}

func (s selection) slice(es *discoveryv1.EndpointSlice) bool {
	_, headless := es.Labels[v1.IsHeadlessService]
	return !s.proxiedOnly || !headless
}

func (s selection) endpoints(ep *v1.Endpoints) bool {
	_, headless := ep.Labels[v1.IsHeadlessService]
	return !s.proxiedOnly || !headless
}
