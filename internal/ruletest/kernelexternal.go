package ruletest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/healthcheck"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// KernelSourceRangesSNATted: kube-proxy's "same node to LB, SNATted" flows
// on the real kernel: a connection with the LoadBalancer IP as its source is
// accepted while the source ranges hold the node's IP
// (offloadtest.Lab.CheckLoadBalancerSNATted).
func KernelSourceRangesSNATted(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.CheckLoadBalancerSNATted(t, l.syncer(t, Options{NodeIP: offloadtest.NodeAddr}))
}

// KernelSourceRanges: loadBalancerSourceRanges on the real kernel: the client
// reaches the LoadBalancer IP while its address is in the ranges, and its SYN
// is dropped when it is not; the ClusterIP is not subject to them.
func KernelSourceRanges(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.ServeTCP(t, 8080)
	r := l.Mode(t, Options{})
	l.Sync(t, r, l.Web(st.WithLoadBalancer("198.18.200.1"), st.WithSourceRanges("198.19.10.0/24")))
	if _, err := offloadtest.Dial(l.Client, "198.18.200.1:80", 3); err != nil {
		t.Errorf("from inside the source ranges: %v", err)
	}
	l.Sync(t, r, l.Web(st.WithLoadBalancer("198.18.200.1"), st.WithSourceRanges("203.0.113.0/24")))
	if err := l.Client.DialDropped("198.18.200.1:80"); err != nil {
		t.Errorf("from outside the source ranges: %v", err)
	}
	if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 1); err != nil {
		t.Errorf("the ClusterIP is not subject to the source ranges: %v", err)
	}
}

// KernelExternalAndLoadBalancer: externalIPs and LoadBalancer IPs: reached from the client through the node;
// loadBalancerSourceRanges drop what comes from elsewhere, and an ingress IP with
// ipMode Proxy is not captured at all.
func KernelExternalAndLoadBalancer(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.ServeTCP(t, 8080)
	p := l.Mode(t, Options{})
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

// KernelLocalWithHealthCheck: externalTrafficPolicy: Local with a health
// check, as a cloud load balancer sees it: while the node has endpoints, the
// health check answers 200 with their count and the NodePort keeps the
// client's address; when they move to another node, the health check answers
// 503 and the NodePort drops.
func KernelLocalWithHealthCheck(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.ServeTCP(t, 8080)
	// The client is outside the cluster here, as a load balancer's clients are
	// (a pod would be sent to any endpoint: kube-proxy's short-circuit).
	p := l.Mode(t, Options{ClusterCIDR: netip.MustParsePrefix("198.19.200.0/24")})
	hc := healthcheck.New(healthcheck.Config{NodeName: st.ThisNode, Addresses: []netip.Addr{netip.MustParseAddr("198.19.10.1")}})
	t.Cleanup(hc.Close)
	local := func(node string) *service.Snapshot {
		eps := l.Endpoints(8080)
		for i := range eps {
			eps[i].NodeName = node
		}
		s := st.Service("web", "198.18.0.10", 80, eps, st.WithNodePort(30080), st.WithExternalLocal())
		s.HealthCheckNodePort = 32000
		for _, e := range eps {
			s.Endpoints = append(s.Endpoints, service.Endpoint{Addr: netip.AddrPortFrom(e.Addr.Addr(), 0), Ready: true, NodeName: node})
		}
		return st.Snapshot(s)
	}
	syncBoth := func(snap *service.Snapshot) {
		t.Helper()
		l.Sync(t, p, snap)
		if err := l.Node.Do(func() error { return hc.Sync(snap) }); err != nil { // listens in the node's namespace
			t.Fatal(err)
		}
	}
	probe := func() (int, int) {
		t.Helper()
		var code, n int
		err := l.Client.Do(func() error {
			// Dialled here, on the namespace's thread: http.Client would dial
			// from a goroutine of its own, in the machine's namespace.
			c, err := net.DialTimeout("tcp4", "198.19.10.1:32000", 3*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: lb-probe\r\nConnection: close\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var body struct {
				LocalEndpoints int `json:"localEndpoints"`
			}
			if err := json.Unmarshal(b, &body); err != nil {
				return fmt.Errorf("body %q: %w", b, err)
			}
			code, n = resp.StatusCode, body.LocalEndpoints
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return code, n
	}

	syncBoth(local(st.ThisNode))
	if code, n := probe(); code != http.StatusOK || n != 3 {
		t.Errorf("three local endpoints: health check %d with %d, want 200 with 3", code, n)
	}
	answers, err := offloadtest.Dial(l.Client, "198.19.10.1:30080", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range answers {
		if a.Client != offloadtest.ClientAddr.String() {
			t.Errorf("policy Local: %s saw %s, want the client %s", a.Backend, a.Client, offloadtest.ClientAddr)
		}
	}

	syncBoth(local("node-b"))
	if code, n := probe(); code != http.StatusServiceUnavailable || n != 0 {
		t.Errorf("no local endpoint: health check %d with %d, want 503 with 0", code, n)
	}
	if err := l.Client.DialDropped("198.19.10.1:30080"); err != nil {
		t.Error("no local endpoint: the NodePort answered, want it dropped")
	}
}
