package userspace

import (
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// fakeClock is a Clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// svcSpec describes a one-port Service for tests.
type svcSpec struct {
	name      string // "ns/name"
	port      string // port name
	proto     service.Protocol
	clusterIP string
	external  []string
	svcPort   uint16
	nodePort  uint16
	affinity  service.Affinity
	endpoints []string // "ip:port" or "ip:port@node"; a "!" prefix marks the endpoint not ready, a "~" prefix terminating but still serving

	internalLocal, externalLocal bool // the traffic policies

	lbIPs, sourceRanges []string // a LoadBalancer's ingress IPs and loadBalancerSourceRanges
}

func (s svcSpec) build(t testing.TB) *service.Service {
	t.Helper()
	ns, name, _ := strings.Cut(s.name, "/")
	proto := s.proto
	if proto == "" {
		proto = service.TCP
	}
	svc := &service.Service{
		NamespacedName:      service.NamespacedName{Namespace: ns, Name: name},
		Type:                service.TypeClusterIP,
		Affinity:            s.affinity,
		InternalPolicyLocal: s.internalLocal,
		ExternalPolicyLocal: s.externalLocal,
	}
	if s.clusterIP != "" {
		svc.ClusterIPs = []netip.Addr{netip.MustParseAddr(s.clusterIP)}
	}
	for _, ip := range s.external {
		svc.ExternalIPs = append(svc.ExternalIPs, netip.MustParseAddr(ip))
	}
	if s.nodePort != 0 {
		svc.Type = service.TypeNodePort
	}
	for _, ip := range s.lbIPs {
		svc.Type = service.TypeLoadBalancer
		svc.LoadBalancerIPs = append(svc.LoadBalancerIPs, netip.MustParseAddr(ip))
	}
	for _, r := range s.sourceRanges {
		svc.LoadBalancerSourceRanges = append(svc.LoadBalancerSourceRanges, netip.MustParsePrefix(r))
	}
	p := &service.Port{
		Name:     service.PortName{NamespacedName: svc.NamespacedName, Port: s.port, Protocol: proto},
		Service:  svc,
		Port:     s.svcPort,
		Protocol: proto,
		NodePort: s.nodePort,
	}
	for _, e := range s.endpoints {
		ready, serving, terminating := true, true, false
		switch e[0] {
		case '!':
			ready, serving, e = false, false, e[1:]
		case '~':
			ready, terminating, e = false, true, e[1:]
		}
		e, node, _ := strings.Cut(e, "@")
		p.Endpoints = append(p.Endpoints, service.Endpoint{
			Addr: netip.MustParseAddrPort(e), Ready: ready, Serving: serving, Terminating: terminating, NodeName: node,
		})
	}
	svc.Ports = []*service.Port{p}
	return svc
}

func snapshotOf(t testing.TB, specs ...svcSpec) *service.Snapshot {
	t.Helper()
	var svcs []*service.Service
	for _, s := range specs {
		svcs = append(svcs, s.build(t))
	}
	return service.NewSnapshot(svcs, nil)
}

// backend is a test server: a TCP listener, or a UDP socket, that answers with its
// name.
type backend struct {
	name string
	addr netip.AddrPort
	wg   sync.WaitGroup
}

// listenFunc makes a socket; netns tests make them inside a namespace.
type listenFunc func(fn func() error) error

func direct(fn func() error) error { return fn() }

// startTCPBackend serves handle on each connection accepted at addr ("127.0.0.1:0").
// The server stops, and its goroutines end, at test cleanup.
func startTCPBackend(t testing.TB, in listenFunc, name, addr string, handle func(name string, c net.Conn)) *backend {
	t.Helper()
	var ln net.Listener
	if err := in(func() (err error) { ln, err = net.Listen("tcp4", addr); return err }); err != nil {
		t.Fatalf("backend %s: %v", name, err)
	}
	b := &backend{name: name, addr: ln.Addr().(*net.TCPAddr).AddrPort()}
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	b.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			b.wg.Go(func() {
				defer c.Close()
				handle(name, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		b.wg.Wait()
	})
	return b
}

// sayName writes the backend's name and closes.
func sayName(name string, c net.Conn) { io.WriteString(c, name) }

// echo copies what it reads back, with the backend's name first. It copies
// through a buffer, not splice, so that it holds no pipe (see proxyCopy).
func echo(name string, c net.Conn) {
	io.WriteString(c, name+":")
	io.Copy(c, struct{ io.Reader }{c})
}

// startUDPBackend answers each datagram with "name:" and the datagram.
func startUDPBackend(t testing.TB, in listenFunc, name, addr string) *backend {
	t.Helper()
	var conn net.PacketConn
	if err := in(func() (err error) { conn, err = net.ListenPacket("udp4", addr); return err }); err != nil {
		t.Fatalf("backend %s: %v", name, err)
	}
	b := &backend{name: name, addr: conn.LocalAddr().(*net.UDPAddr).AddrPort()}
	b.wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			conn.WriteTo(append([]byte(name+":"), buf[:n]...), from)
		}
	})
	t.Cleanup(func() {
		conn.Close()
		b.wg.Wait()
	})
	return b
}

// eventually polls cond until it holds, failing the test after a generous
// deadline. It waits for a state, it does not assert a duration.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
