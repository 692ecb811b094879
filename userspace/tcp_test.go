package userspace

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAcceptedSocketsInheritKeepAlive checks what listenTCP relies on: the
// kernel copies the listener's keep-alive options into each accepted socket,
// so the proxy need not set them per connection.
func TestAcceptedSocketsInheritKeepAlive(t *testing.T) {
	ln, err := listenTCP(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	accepted, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()

	rc, err := accepted.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, keepAliveIdle},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, keepAliveInterval},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount},
		{"TCP_NODELAY", unix.IPPROTO_TCP, unix.TCP_NODELAY, 1}, // net sets it on every TCPConn
	} {
		var got int
		var gerr error
		if err := rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), o.level, o.opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil || got != o.want {
			t.Errorf("accepted socket: %s = %d (%v), want %d", o.name, got, gerr, o.want)
		}
	}
}

// TestEndpointSocketKeepAlive checks the endpoint side's keep-alive: on, with
// the kernel's timers (endpointDialer), not Go's.
func TestEndpointSocketKeepAlive(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := NewProxier(Config{})
	conn, err := p.dial("tcp", ln.Addr().(*net.TCPAddr).AddrPort(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_keepalive_time")
	if err != nil {
		t.Skipf("the kernel's keep-alive time: %v", err)
	}
	kernelIdle, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, kernelIdle},
	} {
		var got int
		var gerr error
		if err := rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), o.level, o.opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil || got != o.want {
			t.Errorf("endpoint socket: %s = %d (%v), want %d", o.name, got, gerr, o.want)
		}
	}
}
