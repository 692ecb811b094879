package userspace

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// TestKernelTrafficPolicies: the traffic policies on real portals. Backend a
// is on this node, b elsewhere; the client is outside the cluster's pod range
// (198.19.2.0/23 here). With externalTrafficPolicy Local the
// node port, and an external IP (whose portal leads to the node port's
// listener), answer from a only, while the ClusterIP keeps both; the node's
// own connections to its node port go to both (kube-proxy's short-circuit).
// With internalTrafficPolicy Local it is the other way round.
func TestKernelTrafficPolicies(t *testing.T) {
	l := newLabWith(t, Config{Node: dataplane.Node{NodeName: "node", ClusterCIDR: netip.MustParsePrefix("198.19.2.0/23")}})
	const externalIP = "198.18.100.1" // routed to the node like the service range
	svc := web(epA, epB)
	svc.endpoints[0] += "@node"
	svc.endpoints[1] += "@elsewhere"
	svc.nodePort, svc.external = 30082, []string{externalIP}

	count := func(from *netnstest.NS, addr string) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range 4 {
			got[hello(t, from, addr)]++
		}
		return got
	}
	nodePort, clusterIP, external := nodeIP+":30082", webVIP+":80", externalIP+":80"

	t.Run("externalTrafficPolicy Local", func(t *testing.T) {
		s := svc
		s.externalLocal = true
		l.sync(t, s)
		for _, addr := range []string{nodePort, external} {
			if got := count(l.client, addr); got["a"] != 4 {
				t.Errorf("from outside to %s: answers %v, want all from a (on this node)", addr, got)
			}
		}
		if got := count(l.client, clusterIP); got["a"] != 2 || got["b"] != 2 {
			t.Errorf("to the ClusterIP: answers %v, want 2 from each", got)
		}
		if got := count(l.node, nodePort); got["a"] != 2 || got["b"] != 2 {
			t.Errorf("from the node itself to its node port: answers %v, want 2 from each (short-circuit)", got)
		}
		t.Logf("portals:\n%s", l.node.Run(t, "iptables-save", "-t", "nat"))
	})

	t.Run("internalTrafficPolicy Local", func(t *testing.T) {
		s := svc
		s.internalLocal = true
		l.sync(t, s)
		if got := count(l.client, clusterIP); got["a"] != 4 {
			t.Errorf("to the ClusterIP: answers %v, want all from a", got)
		}
		if got := count(l.client, nodePort); got["a"] != 2 || got["b"] != 2 {
			t.Errorf("to the node port: answers %v, want 2 from each", got)
		}
	})

	// A ClusterIP-only Service uses no policy-Cluster endpoints at all: its
	// portal leads to the local ones, and with none on this node (some
	// elsewhere) its ClusterIP is dropped, not rejected: the connection
	// times out, as kube-proxy's "has no local endpoints" DROP makes it.
	t.Run("internalTrafficPolicy Local, ClusterIP only", func(t *testing.T) {
		s := web(epA, epB)
		s.endpoints[0] += "@node"
		s.endpoints[1] += "@elsewhere"
		s.internalLocal = true
		l.sync(t, s)
		if got := count(l.client, clusterIP); got["a"] != 4 {
			t.Errorf("to the ClusterIP: answers %v, want all from a", got)
		}
		s.endpoints = s.endpoints[1:]
		l.sync(t, s)
		c, err := dial(l.client, "tcp4", clusterIP)
		if err == nil {
			c.Close()
			t.Fatalf("no endpoint on this node: connected, want a timeout")
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("no endpoint on this node: %v, want a timeout (dropped)", err)
		}
	})

	t.Run("externalTrafficPolicy Local, no endpoint on this node", func(t *testing.T) {
		s := svc
		s.externalLocal = true
		s.endpoints = s.endpoints[1:]
		l.sync(t, s)
		// The reset may come before the client's connect returns, or after.
		if c, err := dial(l.client, "tcp4", nodePort); err == nil {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if b, err := io.ReadAll(c); err == nil {
				t.Errorf("read %q, want a reset: no endpoint of this node may take it", b)
			}
			c.Close()
		} else if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("connect: %v, want a reset", err)
		}
		if got := hello(t, l.client, clusterIP); got != "b" {
			t.Errorf("to the ClusterIP: %q, want b", got)
		}
	})
}
