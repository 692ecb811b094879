package watch

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWatcherCachesConverted checks what the informers keep of an object
// (transform.go): only svcproxy's annotations, the load-balancer IPs a node
// captures (not those whose ipMode is Proxy), and an invalid object's error,
// reported once.
func TestWatcherCachesConverted(t *testing.T) {
	w, client, logs := newFakeWatcher(t, Config{})
	snaps := start(t, w)
	await(t, snaps, "nothing", is(""))

	lb := testService("lb", "198.18.0.20", 80)
	lb.Annotations = map[string]string{
		"svcproxy.io/ipvs-scheduler":                       "wrr",
		"kubectl.kubernetes.io/last-applied-configuration": "{}",
	}
	lb.Spec.Type = v1.ServiceTypeLoadBalancer
	proxy := v1.LoadBalancerIPModeProxy
	lb.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.18.1.1"}, {IP: "198.18.1.2", IPMode: &proxy}}
	bad := testService("bad", "not-an-ip", 80)
	for _, svc := range []*v1.Service{lb, bad} {
		if _, err := client.CoreV1().Services("default").Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(t.Context(), testSlice("lb-1", "lb", "198.19.0.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	snap := await(t, snaps, "lb and its endpoint", is("default/lb:http 198.18.0.20:80 -> 198.19.0.1:8080"))
	svc := snap.Services()[0]
	if want := map[string]string{"svcproxy.io/ipvs-scheduler": "wrr"}; len(svc.Annotations) != 1 || svc.Annotations["svcproxy.io/ipvs-scheduler"] != "wrr" {
		t.Errorf("annotations %v, want %v", svc.Annotations, want)
	}
	if want := []netip.Addr{netip.MustParseAddr("198.18.1.1")}; !slices.Equal(svc.LoadBalancerIPs, want) {
		t.Errorf("load balancer IPs %v, want %v (198.18.1.2 has ipMode Proxy)", svc.LoadBalancerIPs, want)
	}
	logs.waitFor(t, "object skipped", "default/bad", "spec.clusterIP")
}
