package userspace

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

func dnsSpec(endpoints ...string) svcSpec {
	return svcSpec{name: "kube-system/dns", port: "dns", proto: service.UDP, clusterIP: "198.18.0.53",
		svcPort: 53, endpoints: endpoints}
}

var dnsPort = portName("kube-system/dns", "dns", service.UDP)

// exchange sends msg on c and returns the reply.
func exchange(t testing.TB, c net.Conn, msg string) string {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(buf[:n])
}

func TestUDPSessionLifecycle(t *testing.T) {
	a := startUDPBackend(t, direct, "a", "127.0.0.1:0")
	b := startUDPBackend(t, direct, "b", "127.0.0.1:0")
	p := startProxier(t, Config{UDPIdleTimeout: 300 * time.Millisecond})
	mustSync(t, p, snapshotOf(t, dnsSpec(a.addr.String(), b.addr.String())))
	addr := listenerAddr(t, p, dnsPort.String())

	// One client address is one session: every datagram goes to the same endpoint,
	// and the replies come from the address the client sent to (a connected UDP
	// socket accepts nothing else).
	c1, err := net.Dial("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	for _, msg := range []string{"q1", "q2", "q3"} {
		if got := exchange(t, c1, msg); got != "a:"+msg {
			t.Errorf("client 1 sent %s, got %q; want a:%s", msg, got, msg)
		}
	}
	// A second client address is a second session, round-robin to b.
	c2, err := net.Dial("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := exchange(t, c2, "q"); got != "b:q" {
		t.Errorf("client 2 got %q, want b:q", got)
	}
	// Counters are added after each datagram is sent on, so they may trail the reply.
	eventually(t, "the counters show 2 sessions, 7 bytes in, 15 out", func() bool {
		c := p.Stats()[dnsPort]
		return c.ConnectionsOpened == 2 && c.BytesFromClients == 7 && c.BytesToClients == 15
	})

	// Idle sessions end; the next datagram opens a new one.
	eventually(t, "idle sessions close", func() bool { return p.Stats()[dnsPort].ConnectionsActive == 0 })
	if got := exchange(t, c2, "again"); !strings.HasSuffix(got, ":again") {
		t.Errorf("after idle: got %q, want an answer", got)
	}
	if c := p.Stats()[dnsPort]; c.ConnectionsOpened != 3 {
		t.Errorf("sessions opened %d, want 3", c.ConnectionsOpened)
	}
}

func TestUDPEndpointRemovedEndsSessions(t *testing.T) {
	a := startUDPBackend(t, direct, "a", "127.0.0.1:0")
	b := startUDPBackend(t, direct, "b", "127.0.0.1:0")
	p := startProxier(t, Config{UDPIdleTimeout: time.Hour})
	mustSync(t, p, snapshotOf(t, dnsSpec(a.addr.String(), b.addr.String())))
	c, err := net.Dial("udp4", listenerAddr(t, p, dnsPort.String()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := exchange(t, c, "q"); got != "a:q" {
		t.Fatalf("got %q, want a:q", got)
	}
	mustSync(t, p, snapshotOf(t, dnsSpec(b.addr.String())))
	eventually(t, "the session to a ends", func() bool { return p.Stats()[dnsPort].ConnectionsActive == 0 })
	if got := exchange(t, c, "q"); got != "b:q" {
		t.Errorf("after removing a: got %q, want b:q", got)
	}
}
