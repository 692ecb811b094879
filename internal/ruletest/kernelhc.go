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

	"github.com/svcproxy/svcproxy/healthcheck"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

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
	p := l.Proxier(t, Options{ClusterCIDR: netip.MustParsePrefix("198.19.200.0/24")})
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
