package kubeproxy

import (
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// What the benchmark writes through the API server: Services, and their
// EndpointSlices as the EndpointSlice controller writes them (its labels,
// the Service as controlling owner, endpoints with conditions, nodeName and
// a Pod targetRef, and endpoints.kubernetes.io/last-change-trigger-time),
// so that both proxies read the objects of a real cluster.

// size is one cluster of the benchmark: Services, each with one TCP port
// and endpoints endpoints.
type size struct{ services, endpoints int }

func (s size) String() string { return fmt.Sprintf("%dx%d", s.services, s.endpoints) }

// label is the size as the docs write it: "10,000 × 3".
func (s size) label() string { return fmt.Sprintf("%s × %d", thousands(s.services), s.endpoints) }

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

const (
	// namespaces the Services are spread over.
	namespaces = 10
	// nodeName is the node both proxies run as; it exists in the API
	// server (newNode), as kube-proxy asks for its addresses.
	nodeName = "bench-node"
	// servicePort and targetPort: every Service is port 80 to 8080.
	servicePort = 80
	targetPort  = 8080
	// managedBy is the EndpointSlice controller's value of
	// endpointslice.kubernetes.io/managed-by.
	managedBy = "endpointslice-controller.k8s.io"
	// podRange is how many pod addresses there are: 198.19.0.1 to
	// 198.19.127.254 (198.19.0.0/17; the links of the benchmark's
	// namespaces are in the other half).
	podRange = 1<<15 - 2
)

// svcName is the name and namespace of Service i.
func svcName(i int) (name, ns string) {
	return fmt.Sprintf("svc-%05d", i), fmt.Sprintf("bench-%02d", i%namespaces)
}

// clusterIP is the ClusterIP of Service i, from 198.18.0.16 (the API server
// gives 198.18.0.1 to "kubernetes"). Service indexes beyond the size are the
// Services the changes create.
func clusterIP(i int) netip.Addr {
	n := 16 + i
	return netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)})
}

// podIP is pod address h (any int; it wraps in podRange). Pods back more
// than one Service at the larger sizes, as in a cluster: 250,000 endpoints
// share 32,766 addresses, each Service's own endpoints all distinct.
func podIP(h int) netip.Addr {
	n := 1 + h%podRange
	return netip.AddrFrom4([4]byte{198, 19, byte(n >> 8), byte(n)})
}

// endpointIPs are the addresses of Service i's endpoints in a cluster of sz.
func (sz size) endpointIPs(i int) []netip.Addr {
	out := make([]netip.Addr, sz.endpoints)
	for j := range out {
		out[j] = podIP(i*sz.endpoints + j)
	}
	return out
}

// addedIP is the address of the endpoint change k adds to Service i: one
// none of its endpoints has.
func (sz size) addedIP(i, k int) netip.Addr { return podIP(i*sz.endpoints + sz.endpoints + k) }

// newService is Service i: ClusterIP, one named TCP port, a selector (as a
// Deployment's Service has; nothing acts on it here).
func newService(i int) *v1.Service {
	name, ns := svcName(i)
	ip := clusterIP(i).String()
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  ip,
			ClusterIPs: []string{ip},
			Selector:   map[string]string{"app": name},
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: servicePort,
				TargetPort: intstr.FromInt32(targetPort)}},
		},
	}
}

// endpoint is one endpoint of a slice: ready, or (terminating) a pod on
// its way out that still serves.
type endpoint struct {
	ip          netip.Addr
	terminating bool
}

// newSlice is the EndpointSlice of svc, as the EndpointSlice controller
// writes it at trigger (the time of the change that made it). Its name is
// fixed ("<service>-bench") where the controller's has a random suffix, so
// the changes can update it by name.
func newSlice(svc *v1.Service, eps []endpoint, trigger time.Time) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      svc.Name + "-bench",
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   managedBy,
			},
			Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: trigger.UTC().Format(time.RFC3339Nano)},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP),
			Port: ptr.To[int32](targetPort)}},
	}
	if svc.UID != "" {
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name,
			UID: svc.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
	for j, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{e.ip.String()},
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(!e.terminating), Serving: ptr.To(true), Terminating: ptr.To(e.terminating)},
			NodeName:  ptr.To(fmt.Sprintf("worker-%d", (j+len(svc.Name))%100)),
			TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: fmt.Sprintf("%s-%s", svc.Name, e.ip.String())},
		})
	}
	return s
}

// ready makes endpoints of ips, all ready.
func ready(ips []netip.Addr) []endpoint {
	out := make([]endpoint, len(ips))
	for i, ip := range ips {
		out[i] = endpoint{ip: ip}
	}
	return out
}

// terminating makes endpoints of ips, all terminating and serving.
func terminating(ips []netip.Addr) []endpoint {
	out := ready(ips)
	for i := range out {
		out[i].terminating = true
	}
	return out
}

// newNode is the node both proxies run as, with ip as its InternalIP:
// kube-proxy reads its addresses from it at start.
func newNode(ip netip.Addr) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: ip.String()}, {Type: v1.NodeHostName, Address: nodeName}}},
	}
}
