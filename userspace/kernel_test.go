package userspace

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// lab is a node running the Proxier, a client, and two backends, each in its own
// network namespace, wired by veth pairs:
//
//	client 198.19.1.2 --- 198.19.1.1 node 198.19.2.1 --- 198.19.2.2 backend a
//	                                      198.19.3.1 --- 198.19.3.2 backend b
//
// The client routes the service range 198.18.0.0/16 to the node. The node routes
// it out of any interface (this kernel has no dummy module): its own packets need
// a route before netfilter sees them, and forwarded packets then reach filter
// FORWARD, where REJECT waits. A portal takes them before routing.
type lab struct {
	node, client *netnstest.NS
	ipt          iptables.Interface
	p            *Proxier
}

const (
	nodeIP         = "198.19.1.1"
	webVIP         = "198.18.0.10"
	dnsVIP         = "198.18.0.53"
	epA            = "198.19.2.2"
	epB            = "198.19.3.2"
	webTargetPort  = ":8080"
	echoTargetPort = ":8081"
	dnsTargetPort  = ":5353"
)

func newLab(t *testing.T) *lab { t.Helper(); return newLabWith(t, Config{}) }

// newLabWith is newLab with the proxier configured by cfg (its IPTables, NetNS
// and UDPIdleTimeout are the lab's).
func newLabWith(t *testing.T, cfg Config) *lab {
	t.Helper()
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save", "iptables")
	l := &lab{node: netnstest.New(t), client: netnstest.New(t)}
	pfx := netip.MustParsePrefix
	netnstest.Veth(t, l.node, "to-client", pfx(nodeIP+"/24"), l.client, "eth0", pfx("198.19.1.2/24"))
	l.client.Run(t, "ip", "route", "add", "198.18.0.0/16", "via", nodeIP)
	l.node.Sysctl(t, "net.ipv4.ip_forward", "1")
	l.node.Sysctl(t, "net.ipv4.conf.all.send_redirects", "0")
	for _, be := range []struct{ name, ep, gw string }{{"a", epA, "198.19.2.1"}, {"b", epB, "198.19.3.1"}} {
		ns := netnstest.New(t)
		netnstest.Veth(t, l.node, "to-"+be.name, pfx(be.gw+"/24"), ns, "eth0", pfx(be.ep+"/24"))
		startTCPBackend(t, ns.Do, be.name, be.ep+webTargetPort, sayName)
		startTCPBackend(t, ns.Do, be.name, be.ep+echoTargetPort, echo)
		startUDPBackend(t, ns.Do, be.name, be.ep+dnsTargetPort)
	}
	l.node.Run(t, "ip", "route", "add", "198.18.0.0/16", "dev", "to-a")
	var err error
	if l.ipt, err = iptables.New(iptables.Config{}); err != nil {
		t.Fatal(err)
	}
	cfg.IPTables, cfg.NetNS, cfg.UDPIdleTimeout = l.ipt, l.node.Do, time.Second
	l.p = startProxier(t, cfg)
	return l
}

// echoSvc is a Service "default/echo" (198.18.0.20:80) whose endpoints echo.
func echoSvc(eps ...string) svcSpec {
	s := svcSpec{name: "default/echo", port: "echo", clusterIP: echoVIP, svcPort: 80}
	for _, ep := range eps {
		s.endpoints = append(s.endpoints, ep+echoTargetPort)
	}
	return s
}

const echoVIP = "198.18.0.20"

func (l *lab) sync(t *testing.T, specs ...svcSpec) {
	t.Helper()
	mustSync(t, l.p, snapshotOf(t, specs...))
}

// dial connects from inside ns.
func dial(ns *netnstest.NS, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		c, err = net.DialTimeout(network, addr, 5*time.Second)
		return err
	})
	return c, err
}

// hello connects from ns to addr over TCP and returns what the backend says.
func hello(t *testing.T, ns *netnstest.NS, addr string) string {
	t.Helper()
	c, err := dial(ns, "tcp4", addr)
	if err != nil {
		t.Fatalf("connect from %s to %s: %v", ns.Name, addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return string(b)
}

func web(eps ...string) svcSpec {
	s := webSpec(service.Affinity{})
	for _, ep := range eps {
		s.endpoints = append(s.endpoints, ep+webTargetPort)
	}
	return s
}

func dns(eps ...string) svcSpec {
	s := dnsSpec()
	for _, ep := range eps {
		s.endpoints = append(s.endpoints, ep+dnsTargetPort)
	}
	return s
}

func TestKernel(t *testing.T) {
	l := newLab(t)

	t.Run("ClusterIP TCP round-robin from a pod and from the node", func(t *testing.T) {
		l.sync(t, web(epA, epB))
		var got []string
		for _, from := range []*netnstest.NS{l.client, l.client, l.node, l.node} {
			got = append(got, hello(t, from, webVIP+":80"))
		}
		if strings.Join(got, "") != "abab" {
			t.Errorf("backends %v, want a b a b", got)
		}
	})

	t.Run("ClusterIP UDP from a pod and from the node", func(t *testing.T) {
		l.sync(t, dns(epA))
		for _, from := range []*netnstest.NS{l.client, l.node} {
			c, err := dial(from, "udp4", dnsVIP+":53")
			if err != nil {
				t.Fatal(err)
			}
			if got := exchange(t, c, "q"); got != "a:q" {
				t.Errorf("from %s: %q, want a:q", from.Name, got)
			}
			c.Close()
		}
	})

	t.Run("ClientIP affinity", func(t *testing.T) {
		s := web(epA, epB)
		s.affinity = service.Affinity{ClientIP: true, Timeout: time.Hour}
		l.sync(t, s)
		first := hello(t, l.client, webVIP+":80")
		for range 3 {
			if got := hello(t, l.client, webVIP+":80"); got != first {
				t.Errorf("got %s after %s: affinity broken", got, first)
			}
		}
	})

	t.Run("a refusing endpoint is skipped", func(t *testing.T) {
		s := web(epA)
		s.endpoints = append([]string{epB + ":9"}, s.endpoints...) // nothing listens on :9
		l.sync(t, s)
		for range 4 {
			if got := hello(t, l.client, webVIP+":80"); got != "a" {
				t.Errorf("got %q, want a", got)
			}
		}
	})

	t.Run("no endpoints: refused at once", func(t *testing.T) {
		s := web()
		s.nodePort = 30081
		l.sync(t, s)
		for _, tc := range []struct {
			from *netnstest.NS
			addr string
		}{{l.client, webVIP + ":80"}, {l.node, webVIP + ":80"}, {l.client, nodeIP + ":30081"}} {
			c, err := dial(tc.from, "tcp4", tc.addr)
			if err == nil {
				c.Close()
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("connect from %s to %s: %v, want connection refused", tc.from.Name, tc.addr, err)
			}
		}
	})

	t.Run("endpoint and service changes are followed", func(t *testing.T) {
		l.sync(t, web(epA))
		if got := hello(t, l.client, webVIP+":80"); got != "a" {
			t.Errorf("got %q, want a", got)
		}
		l.sync(t, web(epB))
		if got := hello(t, l.client, webVIP+":80"); got != "b" {
			t.Errorf("after the endpoint change: got %q, want b", got)
		}
		s := web(epB)
		s.svcPort = 8081
		l.sync(t, s)
		if got := hello(t, l.client, webVIP+":8081"); got != "b" {
			t.Errorf("after the port change: got %q, want b", got)
		}
		if rules := l.node.Run(t, "iptables-save", "-t", "nat"); strings.Contains(rules, "--dport 80 ") {
			t.Errorf("the old port is still redirected:\n%s", rules)
		}
	})

	t.Run("NodePort from another namespace", func(t *testing.T) {
		s := web(epA)
		s.nodePort = 30080
		l.sync(t, s)
		if got := hello(t, l.client, nodeIP+":30080"); got != "a" {
			t.Errorf("got %q, want a", got)
		}
	})

	t.Run("nothing of ours is left after cleanup", func(t *testing.T) {
		l.sync(t, web(epA), dns(epA))
		if rules := l.node.Run(t, "iptables-save"); !strings.Contains(rules, ChainPortalsContainer) {
			t.Fatalf("no portals before cleanup:\n%s", rules)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.p.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if err := l.node.Do(func() error { return Cleanup(ctx, l.ipt) }); err != nil {
			t.Errorf("Cleanup after Shutdown: %v", err)
		}
		if rules := l.node.Run(t, "iptables-save"); strings.Contains(rules, "SVCP") {
			t.Errorf("rules left:\n%s", rules)
		}
	})
}
