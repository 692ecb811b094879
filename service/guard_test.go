package service

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func errorStrings(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error() + "\n")
	}
	return b.String()
}

// Two Services on one ClusterIP: the later one is refused
// with a named error, as the API server's allocator would, whatever order the
// listers give.
func TestBuildDuplicateClusterIP(t *testing.T) {
	created := func(at time.Time) func(*v1.Service) {
		return func(s *v1.Service) { s.CreationTimestamp = metav1.NewTime(at) }
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	first := svc("zeta", created(t0))
	later := svc("alpha", created(t0.Add(time.Minute)))
	other := svc("other", func(s *v1.Service) { s.Spec.ClusterIP = "198.18.0.11" })
	for _, order := range [][]*v1.Service{{first, later, other}, {later, other, first}} {
		snap := Build(order, nil, nil)
		if _, ok := snap.Service(NamespacedName{Namespace: "default", Name: "zeta"}); !ok {
			t.Errorf("the first Service on 198.18.0.10 was refused")
		}
		if _, ok := snap.Service(NamespacedName{Namespace: "default", Name: "alpha"}); ok {
			t.Errorf("the later Service on 198.18.0.10 was accepted")
		}
		if snap.Len() != 2 {
			t.Errorf("%d Services, want 2", snap.Len())
		}
		want := `service default/alpha: spec.clusterIP "198.18.0.10": already allocated to service default/zeta`
		if got := errorStrings(snap.Errors()); strings.TrimSpace(got) != want {
			t.Errorf("errors:\n%s\nwant:\n%s", got, want)
		}
	}
}

// An endpoint that leads back into the proxy (a
// service address) or into the node (loopback, link-local) is refused with an
// error naming the object and field; the Service keeps its other endpoints.
func TestBuildRefusesEndpointsIntoTheProxy(t *testing.T) {
	web := svc("web", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"198.18.100.1"} })
	api := svc("api", func(s *v1.Service) { s.Spec.ClusterIP = "198.18.0.20" })
	slices := []*discoveryv1.EndpointSlice{
		slice("api-1", "api", []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)},
			ep("198.19.1.10", true), ep("198.18.0.10", true), ep("198.18.100.1", true)),
		slice("web-bad", "web", []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)},
			ep("198.19.1.11", true), ep("127.0.0.1", true)),
		slice("web-ll", "web", []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}, ep("169.254.169.254", true)),
		slice("web-1", "web", []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}, ep("198.19.1.12", true)),
	}
	legacy := &v1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old"}, Subsets: []v1.EndpointSubset{{
		Addresses: []v1.EndpointAddress{{IP: "198.19.1.13"}, {IP: "198.18.0.20"}},
		Ports:     []v1.EndpointPort{{Name: "http", Port: 8080}},
	}}}
	old := svc("old", func(s *v1.Service) { s.Spec.ClusterIP = "198.18.0.30" })
	snap := Build([]*v1.Service{web, api, old}, slices, []*v1.Endpoints{legacy})
	want := []string{
		`endpointslice default/web-bad: endpoints[1].addresses[0] "127.0.0.1": is loopback: it would reach the node's own listeners, not a pod`,
		`endpointslice default/web-ll: endpoints[0].addresses[0] "169.254.169.254": is link-local: it would reach the node's own listeners, not a pod`,
		`endpointslice default/api-1: endpoints[1].addresses[0] "198.18.0.10": is the ClusterIP of service default/web: an endpoint must not lead back into the proxy`,
		`endpointslice default/api-1: endpoints[2].addresses[0] "198.18.100.1": is an external IP of service default/web: an endpoint must not lead back into the proxy`,
		`endpoints default/old: subsets[0].addresses[1].ip "198.18.0.20": is the ClusterIP of service default/api: an endpoint must not lead back into the proxy`,
	}
	if got := strings.TrimSpace(errorStrings(snap.Errors())); got != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	endpoints := func(name string) string {
		svc, _ := snap.Service(NamespacedName{Namespace: "default", Name: name})
		var out []string
		for _, e := range svc.Ports[0].Endpoints {
			out = append(out, e.Addr.String())
		}
		return strings.Join(out, " ")
	}
	for name, want := range map[string]string{"api": "198.19.1.10:8080", "web": "198.19.1.12:8080", "old": "198.19.1.13:8080"} {
		if got := endpoints(name); got != want {
			t.Errorf("%s: endpoints %q, want %q", name, got, want)
		}
	}
}

// RefuseEndpoints drops the endpoints only the node's configuration can name
// (svcproxy's own listeners), leaving the input Snapshot as it was.
func TestRefuseEndpoints(t *testing.T) {
	web := svc("web")
	api := svc("api", func(s *v1.Service) { s.Spec.ClusterIP = "198.18.0.20" })
	snap := Build([]*v1.Service{web, api}, []*discoveryv1.EndpointSlice{
		slice("web-1", "web", []discoveryv1.EndpointPort{port("http", 10256, v1.ProtocolTCP)}, ep("198.19.0.1", true), ep("198.19.1.10", true)),
		slice("api-1", "api", []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}, ep("198.19.0.1", true)),
	}, nil)
	healthz := netip.MustParseAddrPort("198.19.0.1:10256")
	got, errs := RefuseEndpoints(snap, func(e Endpoint) string {
		if e.Addr == healthz {
			return "is svcproxy's /healthz listener"
		}
		return ""
	})
	if want := "service port default/web:http: endpoint 198.19.0.1:10256: is svcproxy's /healthz listener"; len(errs) != 1 || errs[0].Error() != want {
		t.Fatalf("errors %v, want [%s]", errs, want)
	}
	p, _ := got.Port(PortName{NamespacedName: NamespacedName{Namespace: "default", Name: "web"}, Port: "http", Protocol: TCP})
	if len(p.Endpoints) != 1 || p.Endpoints[0].Addr.String() != "198.19.1.10:10256" || p.Service.Ports[0] != p {
		t.Errorf("web after refusal: %+v", p)
	}
	orig, _ := snap.Port(p.Name)
	if len(orig.Endpoints) != 2 {
		t.Errorf("the input Snapshot changed: %+v", orig.Endpoints)
	}
	if a, _ := got.Service(NamespacedName{Namespace: "default", Name: "api"}); a != api2(snap) {
		t.Error("a Service without refused endpoints was copied")
	}
	if len(got.Errors()) != 1 {
		t.Errorf("the Snapshot's errors: %v, want the refusal", got.Errors())
	}
}

// TestRefuseEndpointsAllocatesNothing: a Snapshot whose endpoints are all
// kept comes back as it is, with nothing allocated on the way (svcproxy
// filters every Snapshot so).
func TestRefuseEndpointsAllocatesNothing(t *testing.T) {
	var ess []*discoveryv1.EndpointSlice
	var svcs []*v1.Service
	for i := range 20 {
		name := fmt.Sprintf("svc-%d", i)
		svcs = append(svcs, svc(name, func(s *v1.Service) { s.Spec.ClusterIP = fmt.Sprintf("198.18.0.%d", 10+i) }))
		ess = append(ess, slice(name+"-1", name, []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)},
			ep(fmt.Sprintf("198.19.0.%d", 10+i), true), ep(fmt.Sprintf("198.19.1.%d", 10+i), true)))
	}
	snap := Build(svcs, ess, nil)
	keepAll := func(Endpoint) string { return "" }
	if n := testing.AllocsPerRun(10, func() {
		if got, errs := RefuseEndpoints(snap, keepAll); got != snap || errs != nil {
			t.Fatal("a Snapshot with nothing refused was not returned as it was")
		}
	}); n > 1 { // the list of Services it would have built
		t.Errorf("%v allocations for a Snapshot of 20 Services with nothing refused, want at most 1", n)
	}
}

func api2(snap *Snapshot) *Service {
	s, _ := snap.Service(NamespacedName{Namespace: "default", Name: "api"})
	return s
}
