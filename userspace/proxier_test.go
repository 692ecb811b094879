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

	"go.uber.org/goleak"

	"github.com/svcproxy/svcproxy/service"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startProxier returns a Proxier that is shut down at test cleanup.
func startProxier(t testing.TB, cfg Config) *Proxier {
	t.Helper()
	p := NewProxier(cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	return p
}

func mustSync(t testing.TB, p *Proxier, snap *service.Snapshot) {
	t.Helper()
	if err := p.Sync(snap); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// portStatus returns the status of the service port named like "default/web:http".
func portStatus(t testing.TB, p *Proxier, name string) PortStatus {
	t.Helper()
	for _, ps := range p.Status().Ports {
		if ps.Name == name {
			return ps
		}
	}
	t.Fatalf("no service port %s in %+v", name, p.Status())
	return PortStatus{}
}

// listenerAddr is where a test reaches a service port's listener on loopback.
func listenerAddr(t testing.TB, p *Proxier, name string) string {
	t.Helper()
	ps := portStatus(t, p, name)
	if ps.Listener == 0 {
		t.Fatalf("service port %s has no listener: %s", name, ps.Error)
	}
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ps.Listener).String()
}

// readAll connects to addr and returns everything the far side sends, or
// what it sent until a generous deadline.
func readAll(t testing.TB, addr string) (string, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestTCPRoundRobin(t *testing.T) {
	a := startTCPBackend(t, direct, "a", "127.0.0.1:0", sayName)
	b := startTCPBackend(t, direct, "b", "127.0.0.1:0", sayName)
	p := startProxier(t, Config{})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, a.addr.String(), b.addr.String())))
	addr := listenerAddr(t, p, "default/web:http")

	var got []string
	for range 4 {
		s, err := readAll(t, addr)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if strings.Join(got, ",") != "a,b,a,b" {
		t.Errorf("backends in order %v, want a,b,a,b", got)
	}
	c := p.Stats()[portName("default/web", "http", service.TCP)]
	if c.ConnectionsOpened != 4 || c.BytesToClients != 4 {
		t.Errorf("counters %+v, want 4 connections and 4 bytes to clients", c)
	}
}

func TestTCPHalfClose(t *testing.T) {
	// The backend reads the whole request (until the client's FIN), then answers:
	// the proxy must pass the FIN on without closing the other direction.
	reply := func(name string, c net.Conn) {
		req, _ := io.ReadAll(c)
		io.WriteString(c, name+" got "+string(req))
	}
	// The backend speaks first and half-closes; the client then still sends.
	heard := make(chan string, 1)
	greet := func(name string, c net.Conn) {
		io.WriteString(c, "hello from "+name)
		c.(*net.TCPConn).CloseWrite()
		req, _ := io.ReadAll(c)
		heard <- string(req)
	}
	tests := []struct {
		name    string
		handler func(string, net.Conn)
		send    string
		want    string
	}{
		{"client closes first", reply, "ping", "a got ping"},
		{"backend closes first", greet, "bye", "hello from a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := startTCPBackend(t, direct, "a", "127.0.0.1:0", tt.handler)
			p := startProxier(t, Config{})
			mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
			c, err := net.Dial("tcp", listenerAddr(t, p, "default/web:http"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tt.send)
			c.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil || string(got) != tt.want {
				t.Errorf("read %q, %v; want %q", got, err, tt.want)
			}
			if tt.name == "backend closes first" {
				if req := <-heard; req != tt.send {
					t.Errorf("backend heard %q, want %q", req, tt.send)
				}
			}
		})
	}
}

func TestTCPRefusingEndpointIsSkipped(t *testing.T) {
	refusing := closedPort(t)
	good := startTCPBackend(t, direct, "good", "127.0.0.1:0", sayName)
	p := startProxier(t, Config{})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{ClientIP: true, Timeout: time.Hour},
		refusing.String(), good.addr.String())))
	addr := listenerAddr(t, p, "default/web:http")
	for i := range 3 {
		if s, err := readAll(t, addr); err != nil || s != "good" {
			t.Fatalf("connection %d: %q, %v; want good", i, s, err)
		}
	}
	if c := p.Stats()[portName("default/web", "http", service.TCP)]; c.DialFailures != 1 {
		t.Errorf("dial failures %d, want 1 (then affinity keeps the client on the good one)", c.DialFailures)
	}
}

func TestTCPNoEndpointsResets(t *testing.T) {
	p := startProxier(t, Config{})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{})))
	if s, err := readAll(t, listenerAddr(t, p, "default/web:http")); err == nil {
		t.Errorf("read %q with no error, want a reset", s)
	}
}

// dialEcho connects through the proxy to an echo backend and checks its greeting.
func dialEcho(t *testing.T, addr, greeting string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	buf := make([]byte, len(greeting))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != greeting {
		t.Fatalf("greeting %q, %v; want %q", buf, err, greeting)
	}
	return c
}

func TestBindFailureIsReportedForThatPortOnly(t *testing.T) {
	taken, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", sayName)
	clash := webSpec(service.Affinity{}, be.addr.String())
	clash.name, clash.nodePort = "default/clash", uint16(taken.Addr().(*net.TCPAddr).Port)
	p := startProxier(t, Config{})
	err = p.Sync(snapshotOf(t, webSpec(service.Affinity{}, be.addr.String()), clash))
	if err == nil || !strings.Contains(err.Error(), "default/clash:http") {
		t.Fatalf("Sync error %v, want one naming default/clash:http", err)
	}
	if ps := portStatus(t, p, "default/clash:http"); ps.Error == "" || ps.NodePort != 0 {
		t.Errorf("clash status %+v, want an error and no node port", ps)
	}
	for _, name := range []string{"default/web:http", "default/clash:http"} {
		if s, err := readAll(t, listenerAddr(t, p, name)); err != nil || s != "a" {
			t.Errorf("%s: %q, %v", name, s, err)
		}
	}
}

func TestServiceRemovedClosesListener(t *testing.T) {
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", sayName)
	p := startProxier(t, Config{})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
	addr := listenerAddr(t, p, "default/web:http")
	mustSync(t, p, snapshotOf(t))
	if len(p.Status().Ports) != 0 {
		t.Errorf("ports after removal: %+v", p.Status().Ports)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Errorf("listener %s still accepts", addr)
	}
}

func TestShutdownGrace(t *testing.T) {
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", echo)
	tests := []struct {
		name      string
		finish    bool // the client ends its connection during the grace period
		wantError bool
	}{
		{"connections finish in time", true, false},
		{"connections cut after the grace period", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewProxier(Config{})
			mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
			c := dialEcho(t, listenerAddr(t, p, "default/web:http"), "a:")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- p.Shutdown(ctx) }()
			eventually(t, "the listener is closed", func() bool { return portStatus(t, p, "default/web:http").Listener == 0 })
			if tt.finish {
				c.Close()
			} else {
				cancel() // the grace period is over
			}
			err := <-done
			if (err != nil) != tt.wantError || (tt.wantError && !errors.Is(err, context.Canceled)) {
				t.Errorf("Shutdown: %v, want error %v", err, tt.wantError)
			}
			if !tt.finish {
				if b, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("cut connection: read %q, %v; want a reset", b, err)
				}
			}
		})
	}
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}
