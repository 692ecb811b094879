package ruletest

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// KernelExternalAndLoadBalancer: externalIPs and LoadBalancer IPs: reached from the client through the node;
// loadBalancerSourceRanges drop what comes from elsewhere, and an ingress IP with
// ipMode Proxy is not captured at all.
func KernelExternalAndLoadBalancer(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.ServeTCP(t, 8080)
	p := l.Proxier(t, Options{})
	lb := func(ranges ...string) *service.Snapshot {
		obj := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: v1.ServiceSpec{
				Type: v1.ServiceTypeLoadBalancer, ClusterIP: "198.18.0.10", ExternalIPs: []string{"198.18.100.1"},
				Ports:                    []v1.ServicePort{{Name: "p", Port: 80, NodePort: 30080}},
				LoadBalancerSourceRanges: ranges,
			},
			Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{
				{IP: "198.18.200.1"}, {IP: "198.18.200.2", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)},
			}}},
		}
		var eps []discoveryv1.Endpoint
		for _, e := range l.Endpoints(8080) {
			eps = append(eps, discoveryv1.Endpoint{Addresses: []string{e.Addr.Addr().String()}, NodeName: ptr.To(st.ThisNode)})
		}
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("p"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
			Endpoints:   eps,
		}
		snap := service.Build([]*v1.Service{obj}, []*discoveryv1.EndpointSlice{es}, nil)
		if errs := snap.Errors(); len(errs) > 0 {
			t.Fatal(errs)
		}
		return snap
	}
	l.Sync(t, p, lb("198.19.10.0/24"))
	for _, dst := range []string{"198.18.100.1:80", "198.18.200.1:80"} {
		if _, err := offloadtest.Dial(l.Client, dst, 3); err != nil {
			t.Errorf("%s from inside the source ranges: %v", dst, err)
		}
	}
	if err := l.Client.DialDropped("198.18.200.2:80"); err != nil {
		t.Error("198.18.200.2 has ipMode Proxy: the node must not DNAT it, yet a backend answered")
	}
	l.Sync(t, p, lb("203.0.113.0/24"))
	if err := l.Client.DialDropped("198.18.200.1:80"); err != nil {
		t.Error("from outside the source ranges: a backend answered, want the SYN dropped")
	}
	if _, err := offloadtest.Dial(l.Client, "198.18.100.1:80", 1); err != nil {
		t.Errorf("the external IP is not subject to the LoadBalancer's source ranges: %v", err)
	}
}
