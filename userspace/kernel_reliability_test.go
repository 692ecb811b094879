package userspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// dialEchoFrom connects from ns to addr and checks the echo backend's greeting.
func dialEchoFrom(t *testing.T, ns *netnstest.NS, addr, greeting string) net.Conn {
	t.Helper()
	c, err := dial(ns, "tcp4", addr)
	if err != nil {
		t.Fatalf("connect from %s to %s: %v", ns.Name, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	if got := readN(t, c, len(greeting)); got != greeting {
		t.Fatalf("greeting %q, want %q", got, greeting)
	}
	return c
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(buf)
}

// refused connects from ns to addr and reports whether the connection was
// refused (a reset or a port unreachable), as opposed to accepted or left to
// time out.
func refused(ns *netnstest.NS, network, addr string) error {
	c, err := dial(ns, network, addr)
	if err == nil {
		c.Close()
		return fmt.Errorf("connected")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return err
	}
	return nil
}

// TestKernelEstablishedConnectionsSurvive: through a ClusterIP and the real
// portals, a connection keeps its endpoint when the endpoint leaves and when
// its Service, the namespace's only one, is deleted. The last case needs
// conntrack to go on translating the connection's REDIRECT after the last
// portal is gone (SVCP-LISTENERS keeps it running under iptables-nft).
func TestKernelEstablishedConnectionsSurvive(t *testing.T) {
	l := newLab(t)
	l.sync(t, echoSvc(epA, epB))
	toA := dialEchoFrom(t, l.client, echoVIP+":80", "a:")
	toB := dialEchoFrom(t, l.client, echoVIP+":80", "b:")

	l.sync(t, echoSvc(epB))
	if got := echoRoundTrip(t, toA, "after a left"); got != "after a left" {
		t.Errorf("connection to the endpoint that left: echoed %q", got)
	}
	dialEchoFrom(t, l.client, echoVIP+":80", "b:") // new connections go to b only
	dialEchoFrom(t, l.client, echoVIP+":80", "b:")
	l.sync(t)
	for _, c := range []net.Conn{toA, toB} {
		if got := echoRoundTrip(t, c, "after the service left"); got != "after the service left" {
			t.Errorf("connection after its Service was deleted: echoed %q", got)
		}
	}
	if err := refused(l.client, "tcp4", echoVIP+":80"); err == nil {
		t.Errorf("a new connection to the deleted Service was refused by the proxy; want it not to reach a listener")
	}
}

// TestKernelShutdown: during the grace period, established connections keep
// flowing (their portals and conntrack stay) and new ones are refused at once;
// after it, nothing of ours is left.
func TestKernelShutdown(t *testing.T) {
	l := newLab(t)
	l.sync(t, echoSvc(epA), dns(epA))
	c := dialEchoFrom(t, l.client, echoVIP+":80", "a:")
	fromNode := dialEchoFrom(t, l.node, echoVIP+":80", "a:")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.p.Shutdown(ctx) }()
	eventually(t, "the listeners are closed", func() bool { return portStatus(t, l.p, "default/echo:echo").Listener == 0 })

	for _, conn := range []net.Conn{c, fromNode} {
		if got := echoRoundTrip(t, conn, "in the grace period"); got != "in the grace period" {
			t.Errorf("established connection during the grace period: echoed %q", got)
		}
	}
	for _, from := range []*netnstest.NS{l.client, l.node} {
		if err := refused(from, "tcp4", echoVIP+":80"); err != nil {
			t.Errorf("new connection from %s during the grace period: %v, want refused", from.Name, err)
		}
	}
	c.Close()
	fromNode.Close()
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if rules := l.node.Run(t, "iptables-save"); strings.Contains(rules, "SVCP") {
		t.Errorf("rules left after shutdown:\n%s", rules)
	}
}

// TestKernelListenersTakeOnlyPortals: a listener is bound to 0.0.0.0, yet a
// connection sent straight to its port, from a pod or from the node, is
// refused; only what a portal redirected is proxied. An IPv6-only Service gets
// no listener at all, and Status says why.
func TestKernelListenersTakeOnlyPortals(t *testing.T) {
	l := newLab(t)
	v6 := web(epA)
	v6.name, v6.clusterIP = "default/web6", "2001:db8:18::10"
	l.sync(t, web(epA), dns(epA), v6)
	tcpPort := portStatus(t, l.p, "default/web:http").Listener
	udpPort := portStatus(t, l.p, dnsPort.String()).Listener

	if got := hello(t, l.client, webVIP+":80"); got != "a" {
		t.Fatalf("through the ClusterIP: %q, want a", got)
	}
	for _, tc := range []struct {
		from *netnstest.NS
		addr string
	}{
		{l.client, fmt.Sprintf("%s:%d", nodeIP, tcpPort)},
		{l.node, fmt.Sprintf("127.0.0.1:%d", tcpPort)},
		{l.node, fmt.Sprintf("%s:%d", nodeIP, tcpPort)},
	} {
		if err := refused(tc.from, "tcp4", tc.addr); err != nil {
			t.Errorf("straight to the listener, from %s to %s: %v, want refused", tc.from.Name, tc.addr, err)
		}
	}
	c, err := dial(l.client, "udp4", fmt.Sprintf("%s:%d", nodeIP, udpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("q"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 100)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a datagram straight to the UDP listener: %v, want refused", err)
	}

	st := l.p.Status()
	for _, ps := range st.Ports {
		if ps.Name == "default/web6:http" {
			t.Errorf("the IPv6-only Service has a listener: %+v", ps)
		}
	}
	if len(st.Unserved) != 1 || st.Unserved[0].Name != "default/web6:http" || !strings.Contains(st.Unserved[0].Reason, "IPv6") {
		t.Errorf("Status.Unserved = %+v, want default/web6:http and why", st.Unserved)
	}
}

// TestKernelEndpointLoops: through the real portals, an endpoint that is the
// Service's own ClusterIP, or the node's address at a listener port, is
// refused: one client connection is one accepted connection, not a chain.
func TestKernelEndpointLoops(t *testing.T) {
	limitFiles(t, 400)
	l := newLab(t)
	l.sync(t, echoSvc(epA))
	listener := portStatus(t, l.p, "default/echo:echo").Listener
	for _, ep := range []string{echoVIP + ":80", fmt.Sprintf("%s:%d", nodeIP, listener)} {
		t.Run(ep, func(t *testing.T) {
			before := l.p.Stats()[portName("default/echo", "echo", "TCP")].ConnectionsOpened
			loop := echoSvc()
			loop.endpoints = []string{ep}
			l.sync(t, loop)
			if err := refused(l.client, "tcp4", echoVIP+":80"); err != nil {
				// No usable endpoint: the portal REJECTs, or the proxier resets.
				c, derr := dial(l.client, "tcp4", echoVIP+":80")
				if derr == nil {
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					_, rerr := c.Read(make([]byte, 1))
					c.Close()
					if !errors.Is(rerr, syscall.ECONNRESET) {
						t.Errorf("through the looping endpoint: %v, want refused or reset", rerr)
					}
				}
			}
			if n := l.p.Stats()[portName("default/echo", "echo", "TCP")].ConnectionsOpened - before; n > 1 {
				t.Errorf("one client connection made the proxier accept %d: it connected to itself", n)
			}
			if ps := portStatus(t, l.p, "default/echo:echo"); len(ps.Refused) != 1 {
				t.Errorf("refused %q, want the looping endpoint", ps.Refused)
			}
			l.sync(t, echoSvc(epA))
			dialEchoFrom(t, l.client, echoVIP+":80", "a:")
		})
	}
}
