package healthcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// web is default/web with policy Local, a health check port, and endpoints:
// ready ones on the nodes given, one not ready on node-a.
func web(port uint16, readyOn ...string) *service.Service {
	s := &service.Service{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"},
		Type: service.TypeLoadBalancer, ExternalPolicyLocal: true, HealthCheckNodePort: port}
	for i, node := range readyOn {
		s.Endpoints = append(s.Endpoints, service.Endpoint{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 1, byte(i + 1)}), 0),
			Ready: true, Serving: true, NodeName: node})
	}
	s.Endpoints = append(s.Endpoints, service.Endpoint{Addr: netip.MustParseAddrPort("198.19.1.99:0"), NodeName: "node-a"})
	return s
}

func get(t *testing.T, port uint16) (int, http.Header, response) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body response
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return resp.StatusCode, resp.Header, body
}

// kube-proxy's answers: 200 with the local endpoint count, 503 with none.
func TestHealthCheck(t *testing.T) {
	port := freePort(t)
	s := New(Config{NodeName: "node-a", Addresses: loopback})
	t.Cleanup(s.Close)

	if err := s.Sync(service.NewSnapshot([]*service.Service{web(port, "node-a", "node-a", "node-b")}, nil)); err != nil {
		t.Fatal(err)
	}
	code, h, body := get(t, port)
	if code != http.StatusOK || body.LocalEndpoints != 2 || h.Get("X-Load-Balancing-Endpoint-Weight") != "2" ||
		body.Service.Namespace != "default" || body.Service.Name != "web" || !body.ServiceProxyHealthy {
		t.Errorf("two local endpoints: %d %v %+v", code, h, body)
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}

	// The count follows the Snapshot on the same listener.
	if err := s.Sync(service.NewSnapshot([]*service.Service{web(port, "node-b")}, nil)); err != nil {
		t.Fatal(err)
	}
	code, h, body = get(t, port)
	if code != http.StatusServiceUnavailable || body.LocalEndpoints != 0 || h.Get("X-Load-Balancing-Endpoint-Weight") != "0" {
		t.Errorf("no local endpoint: %d %v %+v, want 503", code, h, body)
	}

	// The Service goes: so does the listener.
	if err := s.Sync(service.NewSnapshot(nil, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port)); err == nil {
		t.Error("the health check port still answers after the Service went")
	}
}

// A proxy whose rules are stale answers 503 whatever its endpoints.
func TestHealthCheckProxyUnhealthy(t *testing.T) {
	port := freePort(t)
	s := New(Config{NodeName: "node-a", Addresses: loopback, ProxyHealthy: func() error { return errors.New("last sync failed") }})
	t.Cleanup(s.Close)
	if err := s.Sync(service.NewSnapshot([]*service.Service{web(port, "node-a")}, nil)); err != nil {
		t.Fatal(err)
	}
	if code, _, body := get(t, port); code != http.StatusServiceUnavailable || body.ServiceProxyHealthy || body.LocalEndpoints != 1 {
		t.Errorf("unhealthy proxy: %d %+v, want 503", code, body)
	}
}

// A port that cannot be opened is an error naming the Service and the field; the
// other health checks still serve.
func TestHealthCheckPortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := uint16(busy.Addr().(*net.TCPAddr).Port)
	port := freePort(t)
	other := web(port, "node-a")
	other.Name = "api"
	s := New(Config{NodeName: "node-a", Addresses: loopback})
	t.Cleanup(s.Close)
	err = s.Sync(service.NewSnapshot([]*service.Service{web(busyPort, "node-a"), other}, nil))
	want := fmt.Sprintf("service default/web: spec.healthCheckNodePort %d:", busyPort)
	if err == nil || len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Errorf("error %v, want one starting %q", err, want)
	}
	if code, _, _ := get(t, port); code != http.StatusOK {
		t.Errorf("the other Service's health check: %d", code)
	}
	if st := s.Status(); len(st) != 2 {
		t.Errorf("status %+v: want the serving check and the failed one", st)
	}
}

func TestLocalEndpointsNeedPolicyLocal(t *testing.T) {
	port := freePort(t)
	svc := web(port, "node-a")
	svc.ExternalPolicyLocal = false
	s := New(Config{NodeName: "node-a", Addresses: loopback})
	t.Cleanup(s.Close)
	if err := s.Sync(service.NewSnapshot([]*service.Service{svc}, nil)); err != nil {
		t.Fatal(err)
	}
	if len(s.Status()) != 0 {
		t.Errorf("policy Cluster has no health check: %+v", s.Status())
	}
}
