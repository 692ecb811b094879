package watch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/svcproxy/svcproxy/service"
)

// deadline is how long a test waits for something that normally takes
// milliseconds: generous, because the machine may be busy.
const deadline = 20 * time.Second

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon is started by client-go's init, once per process.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

// logRecorder is a slog.Handler that keeps every message for tests to wait on.
type logRecorder struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

func newLogRecorder() *logRecorder { return &logRecorder{changed: make(chan struct{})} }

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, b.String())
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

// count is the number of messages containing every one of subs.
func (r *logRecorder) count(subs ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		if containsAll(l, subs) {
			n++
		}
	}
	return n
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// waitFor blocks until a message contains every one of subs, and returns it.
func (r *logRecorder) waitFor(t *testing.T, subs ...string) string {
	t.Helper()
	timeout := time.After(deadline)
	for {
		r.mu.Lock()
		for _, l := range r.lines {
			if containsAll(l, subs) {
				r.mu.Unlock()
				return l
			}
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("no log message with %q; got:\n%s", subs, strings.Join(r.lines, "\n"))
		}
	}
}

// start runs w until the test ends, and returns its Snapshots.
func start(t *testing.T, w *Watcher) <-chan *service.Snapshot {
	t.Helper()
	ch := w.Subscribe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ch
}

// await reads Snapshots until one satisfies ok, and returns it.
func await(t *testing.T, ch <-chan *service.Snapshot, what string, ok func(*service.Snapshot) bool) *service.Snapshot {
	t.Helper()
	timeout := time.After(deadline)
	var last *service.Snapshot
	for {
		select {
		case s := <-ch:
			if ok(s) {
				return s
			}
			last = s
		case <-timeout:
			t.Fatalf("no Snapshot with %s within %v; last: %s", what, deadline, describe(last))
		}
	}
}

// describe prints a Snapshot the way tests compare them: one line per port,
// "default/web:http 198.18.0.10:80/TCP -> 198.19.0.1:8080".
func describe(s *service.Snapshot) string {
	if s == nil {
		return "<none>"
	}
	var lines []string
	for _, svc := range s.Services() {
		if len(svc.Ports) == 0 {
			lines = append(lines, svc.NamespacedName.String())
		}
		for _, p := range svc.Ports {
			var eps []string
			for _, e := range p.Endpoints {
				eps = append(eps, e.String())
			}
			ips := make([]string, 0, len(svc.ClusterIPs))
			for _, ip := range svc.ClusterIPs {
				ips = append(ips, ip.String())
			}
			lines = append(lines, fmt.Sprintf("%s %s:%d -> %s", p.Name, strings.Join(ips, ","), p.Port, strings.Join(eps, ",")))
		}
	}
	return strings.Join(lines, "\n")
}

func is(want string) func(*service.Snapshot) bool {
	return func(s *service.Snapshot) bool { return describe(s) == want }
}

// testService is a ClusterIP Service with one TCP port named http.
func testService(name, clusterIP string, port int32) *v1.Service {
	return &v1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.ServiceSpec{
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports: []v1.ServicePort{{
				Name: "http", Port: port, Protocol: v1.ProtocolTCP,
				TargetPort: intstr.FromInt32(8080),
			}},
		},
	}
}

// testSlice is an EndpointSlice of service svc with ready endpoints ips, port http 8080.
func testSlice(name, svc string, ips ...string) *discoveryv1.EndpointSlice {
	port, portName, proto := int32(8080), "http", v1.ProtocolTCP
	es := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
	for _, ip := range ips {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	return es
}
