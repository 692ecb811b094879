package watch_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// apiFollowDeadline is how long a Snapshot may take to follow a change before the
// test fails. The expectation is well under a second (MinSyncPeriod is 10ms);
// the deadline is generous because the machine may be busy, and the measured
// latency is logged, not asserted.
const apiFollowDeadline = 10 * time.Second

// TestAPIServer runs the Watcher against a real kube-apiserver: Services and
// EndpointSlices are created, updated and deleted with client-go, and each
// change must show up in a Snapshot; then kube-apiserver restarts, and a change
// made after the restart must show up too (the informers re-listed).
//
// No controller-manager runs, so the test writes the EndpointSlices itself,
// labelled kubernetes.io/service-name as the EndpointSlice controller does.
func TestAPIServer(t *testing.T) {
	srv := kapitest.Start(t)
	ns := srv.Namespace(t)
	f := startAPIWatcher(t, srv.Kubeconfig)
	api := srv.Client
	web := service.NamespacedName{Namespace: ns, Name: "web"}
	httpPort := service.PortName{NamespacedName: web, Port: "http", Protocol: service.TCP}
	vip := func(port uint16) service.VIP {
		return service.VIP{Protocol: service.TCP, Addr: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.10"), port)}
	}

	f.step(t, "create service", func(ctx context.Context) error {
		_, err := api.CoreV1().Services(ns).Create(ctx, apiWebService(), metav1.CreateOptions{})
		return err
	}, func(s *service.Snapshot) bool {
		p, ok := s.PortByVIP(vip(80))
		return ok && p.Name == httpPort && len(p.Endpoints) == 0
	})

	f.step(t, "create two endpointslices", func(ctx context.Context) error {
		for _, es := range apiWebSlices() {
			if _, err := api.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	}, func(s *service.Snapshot) bool {
		p, ok := s.Port(httpPort)
		return ok && len(p.Endpoints) == 3
	})
	svc, _ := f.latest.Service(web)
	t.Logf("Snapshot of a Service with two EndpointSlices (web-a: 198.19.0.1, 198.19.0.2 with http=8080; "+
		"web-b: 198.19.0.3 with http=8081, terminating):\n%s", apiFormatService(svc))

	f.step(t, "update service", func(ctx context.Context) error {
		obj, err := api.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		obj.Spec.Ports[0].Port = 81
		obj.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		_, err = api.CoreV1().Services(ns).Update(ctx, obj, metav1.UpdateOptions{})
		return err
	}, func(s *service.Snapshot) bool {
		p, ok := s.PortByVIP(vip(81))
		_, old := s.PortByVIP(vip(80))
		return ok && !old && p.Service.Affinity.ClientIP && len(p.Endpoints) == 3
	})

	f.step(t, "update endpointslice", func(ctx context.Context) error {
		es, err := api.DiscoveryV1().EndpointSlices(ns).Get(ctx, "web-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		es.Endpoints[1].Conditions.Ready = new(false)
		_, err = api.DiscoveryV1().EndpointSlices(ns).Update(ctx, es, metav1.UpdateOptions{})
		return err
	}, func(s *service.Snapshot) bool {
		p, ok := s.Port(httpPort)
		return ok && apiEndpoints(p.Ready()) == "198.19.0.1:8080"
	})

	f.step(t, "delete endpointslice", func(ctx context.Context) error {
		return api.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "web-b", metav1.DeleteOptions{})
	}, func(s *service.Snapshot) bool {
		p, ok := s.Port(httpPort)
		return ok && apiEndpoints(p.Endpoints) == "198.19.0.1:8080 198.19.0.2:8080"
	})

	srv.Restart(t)
	f.step(t, "create service after restart", func(ctx context.Context) error {
		db := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "db"},
			Spec: corev1.ServiceSpec{
				ClusterIP: "198.18.0.11",
				Ports:     []corev1.ServicePort{{Name: "pg", Port: 5432}},
			},
		}
		_, err := api.CoreV1().Services(ns).Create(ctx, db, metav1.CreateOptions{})
		return err
	}, func(s *service.Snapshot) bool {
		_, ok := s.Service(service.NamespacedName{Namespace: ns, Name: "db"})
		return ok
	})

	f.step(t, "delete endpointslice after restart", func(ctx context.Context) error {
		return api.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "web-a", metav1.DeleteOptions{})
	}, func(s *service.Snapshot) bool {
		p, ok := s.Port(httpPort)
		return ok && len(p.Endpoints) == 0
	})

	f.step(t, "delete service", func(ctx context.Context) error {
		return api.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{})
	}, func(s *service.Snapshot) bool {
		_, ok := s.Service(web)
		_, vipOK := s.PortByVIP(vip(81))
		return !ok && !vipOK
	})

	t.Logf("Snapshot latency per change (API call start to Snapshot):\n%s", f.latencies.String())
}

// apiFollower reads a Watcher's Snapshots and times how long each change takes
// to show up in one.
type apiFollower struct {
	snaps     <-chan *service.Snapshot
	latest    *service.Snapshot
	latencies strings.Builder
	lastBegan time.Time // when the last step's change began
}

// startAPIWatcher runs a Watcher on kubeconfig until the test ends, and waits for
// its first Snapshot.
func startAPIWatcher(t *testing.T, kubeconfig string) *apiFollower {
	t.Helper()
	return startAPIWatcherConfig(t, watch.Config{Kubeconfig: kubeconfig})
}

// startAPIWatcherConfig is startAPIWatcher with more of the Config: its
// MinSyncPeriod and Logger are the test's.
func startAPIWatcherConfig(t *testing.T, cfg watch.Config) *apiFollower {
	t.Helper()
	cfg.MinSyncPeriod = 10 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(apiTestLog{t}, nil))
	w, err := watch.New(cfg)
	if err != nil {
		t.Fatalf("watch.New: %v", err)
	}
	f := &apiFollower{snaps: w.Subscribe()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }() // owned by the test: stopped by the cleanup
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher Run: %v", err)
		}
	})
	f.wait(t, "first Snapshot", time.Now(), func(*service.Snapshot) bool { return true })
	return f
}

// step makes a change through the API and waits until a Snapshot satisfies
// want. It stops the test when the change fails or the Snapshot never follows.
func (f *apiFollower) step(t *testing.T, name string, change func(context.Context) error, want func(*service.Snapshot) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), apiFollowDeadline)
	defer cancel()
	began := time.Now()
	f.lastBegan = began
	if err := change(ctx); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	f.wait(t, name, began, want)
}

func (f *apiFollower) wait(t *testing.T, name string, began time.Time, want func(*service.Snapshot) bool) {
	t.Helper()
	deadline := time.After(apiFollowDeadline)
	for {
		select {
		case s := <-f.snaps:
			f.latest = s
			if want(s) {
				took := time.Since(began)
				fmt.Fprintf(&f.latencies, "  %-36s %v\n", name, took.Round(time.Millisecond))
				t.Logf("%s: Snapshot followed in %v", name, took.Round(time.Millisecond))
				return
			}
		case <-deadline:
			last := "none"
			if f.latest != nil {
				last = apiFormatSnapshot(f.latest)
			}
			t.Fatalf("%s: no matching Snapshot within %v; the last one:\n%s", name, apiFollowDeadline, last)
		}
	}
}

// apiWebService is a Service with a named targetPort (which each slice resolves
// to its own number) and a numeric one.
func apiWebService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			ClusterIP: "198.18.0.10",
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromString("http")},
				{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090)},
			},
		},
	}
}

// apiWebSlices are what the EndpointSlice controller would write for web: two
// slices, as for pods of two versions during a rollout, where the container
// port named "http" is 8080 in one and 8081 in the other.
func apiWebSlices() []*discoveryv1.EndpointSlice {
	slice := func(name string, httpPort int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: map[string]string{discoveryv1.LabelServiceName: "web"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   eps,
			Ports: []discoveryv1.EndpointPort{
				{Name: new("http"), Port: new(httpPort), Protocol: new(corev1.ProtocolTCP)},
				{Name: new("metrics"), Port: new(int32(9090)), Protocol: new(corev1.ProtocolTCP)},
			},
		}
	}
	ep := func(ip, node, zone string, ready, serving, terminating bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &node,
			Zone:       &zone,
		}
	}
	return []*discoveryv1.EndpointSlice{
		slice("web-a", 8080,
			ep("198.19.0.1", "node-a", "zone-1", true, true, false),
			ep("198.19.0.2", "node-b", "zone-2", true, true, false)),
		slice("web-b", 8081,
			ep("198.19.0.3", "node-a", "zone-1", false, true, true)),
	}
}

// apiFormatSnapshot prints every Service of s with apiFormatService.
func apiFormatSnapshot(s *service.Snapshot) string {
	var b strings.Builder
	for _, svc := range s.Services() {
		b.WriteString(apiFormatService(svc))
	}
	for _, err := range s.Errors() {
		fmt.Fprintf(&b, "error: %v\n", err)
	}
	return b.String()
}

// apiFormatService prints a Service, its ports and their endpoints, one a line.
func apiFormatService(svc *service.Service) string {
	if svc == nil {
		return "<no such service>\n"
	}
	var b strings.Builder
	affinity := "None"
	if svc.Affinity.ClientIP {
		affinity = fmt.Sprintf("ClientIP/%v", svc.Affinity.Timeout)
	}
	fmt.Fprintf(&b, "service %s type=%s clusterIPs=%v affinity=%s\n", svc.NamespacedName, svc.Type, svc.ClusterIPs, affinity)
	for _, p := range svc.Ports {
		fmt.Fprintf(&b, "  port %s %d/%s targetPort=%s nodePort=%d\n", p.Name, p.Port, p.Protocol, p.TargetPort, p.NodePort)
		for _, e := range p.Endpoints {
			fmt.Fprintf(&b, "    %-18s ready=%-5t serving=%-5t terminating=%-5t node=%s zone=%s\n",
				e.Addr, e.Ready, e.Serving, e.Terminating, e.NodeName, e.Zone)
		}
	}
	return b.String()
}

func apiEndpoints(eps []service.Endpoint) string {
	s := make([]string, len(eps))
	for i, e := range eps {
		s[i] = e.Addr.String()
	}
	return strings.Join(s, " ")
}

// apiTestLog sends the Watcher's log lines to the test log.
type apiTestLog struct{ t *testing.T }

func (w apiTestLog) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
