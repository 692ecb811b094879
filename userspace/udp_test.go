package userspace

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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

// udpClient is a client socket of its own (its own address, so its own session).
func udpClient(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestUDPSessionCap: a listener holds at most UDPMaxSessions sessions; a new
// client beyond them takes the place of the idlest one, whose client simply
// gets a new session with its next datagram.
func TestUDPSessionCap(t *testing.T) {
	a := startUDPBackend(t, direct, "a", "127.0.0.1:0")
	p := startProxier(t, Config{UDPIdleTimeout: time.Hour, UDPMaxSessions: 3})
	mustSync(t, p, snapshotOf(t, dnsSpec(a.addr.String())))
	addr := listenerAddr(t, p, dnsPort.String())
	var clients []net.Conn
	for i := range 5 {
		c := udpClient(t, addr)
		clients = append(clients, c)
		if got := exchange(t, c, "q"); got != "a:q" {
			t.Fatalf("client %d: %q", i, got)
		}
		want := uint64(min(i+1, 3))
		eventually(t, fmt.Sprintf("%d sessions", want), func() bool { return p.Stats()[dnsPort].ConnectionsActive == want })
	}
	// The first two clients were evicted, oldest first; each gets a session back.
	for i, c := range clients[:2] {
		if got := exchange(t, c, "again"); got != "a:again" {
			t.Errorf("evicted client %d: %q", i, got)
		}
	}
	st := p.Stats()[dnsPort]
	if st.ConnectionsOpened != 7 || st.ConnectionsActive != 3 {
		t.Errorf("sessions opened %d, active %d; want 7 and 3", st.ConnectionsOpened, st.ConnectionsActive)
	}
}

// TestUDPSessionsOpenOffTheReadLoop: while a new client's session is being
// set up (here: held up in the namespace hook), the listener goes on reading
// and forwarding the datagrams of existing sessions. The new client's datagram
// waits and is delivered once its session is open.
func TestUDPSessionsOpenOffTheReadLoop(t *testing.T) {
	a := startUDPBackend(t, direct, "a", "127.0.0.1:0")
	var hold atomic.Bool
	held, release := make(chan struct{}, 1), make(chan struct{})
	p := startProxier(t, Config{UDPIdleTimeout: time.Hour, NetNS: func(fn func() error) error {
		if hold.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-release
		}
		return fn()
	}})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the proxier's shutdown, also if the test fails
	mustSync(t, p, snapshotOf(t, dnsSpec(a.addr.String())))
	addr := listenerAddr(t, p, dnsPort.String())
	old := udpClient(t, addr)
	if got := exchange(t, old, "q"); got != "a:q" {
		t.Fatalf("first client: %q", got)
	}

	hold.Store(true)
	slow := udpClient(t, addr)
	slow.Write([]byte("slow"))
	<-held // the new session is being opened
	for _, msg := range []string{"q1", "q2", "q3"} {
		if got := exchange(t, old, msg); got != "a:"+msg {
			t.Errorf("existing session while a new one opens: %q, want a:%s", got, msg)
		}
	}
	unblock()
	slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 100)
	n, err := slow.Read(buf)
	if err != nil || string(buf[:n]) != "a:slow" {
		t.Errorf("the new client's datagram sent while its session opened: %q, %v", buf[:n], err)
	}
}

// TestUDPSessionsAreCheap: sessions cost no goroutine each (their replies are
// read by one loop per listener), and end idle.
func TestUDPSessionsAreCheap(t *testing.T) {
	a := startUDPBackend(t, direct, "a", "127.0.0.1:0")
	p := startProxier(t, Config{UDPIdleTimeout: time.Hour})
	mustSync(t, p, snapshotOf(t, dnsSpec(a.addr.String())))
	addr := listenerAddr(t, p, dnsPort.String())
	before := runtime.NumGoroutine()
	const n = 200
	for range n {
		if got := exchange(t, udpClient(t, addr), "q"); got != "a:q" {
			t.Fatalf("got %q", got)
		}
	}
	if active := p.Stats()[dnsPort].ConnectionsActive; active != n {
		t.Fatalf("%d sessions, want %d", active, n)
	}
	if grew := runtime.NumGoroutine() - before; grew > 10 {
		t.Errorf("%d sessions started %d goroutines, want none per session", n, grew)
	}
}

// TestUDPSessionsMakeRoomForNewClients: when the file descriptor budget is
// spent, a new client's session takes the descriptor of the idlest one, as at
// the cap, instead of being refused while idle sessions hold them.
func TestUDPSessionsMakeRoomForNewClients(t *testing.T) {
	a := startUDPBackend(t, direct, "a", "127.0.0.1:0")
	p := startProxier(t, Config{UDPIdleTimeout: time.Hour})
	p.fds.max = 3 // room for three sessions
	mustSync(t, p, snapshotOf(t, dnsSpec(a.addr.String())))
	addr := listenerAddr(t, p, dnsPort.String())
	for i := range 5 {
		if got := exchange(t, udpClient(t, addr), "q"); got != "a:q" {
			t.Fatalf("client %d: %q", i, got)
		}
	}
	if st := p.Stats()[dnsPort]; st.ConnectionsOpened != 5 || st.ConnectionsActive != 3 {
		t.Errorf("sessions opened %d, active %d; want 5 and 3", st.ConnectionsOpened, st.ConnectionsActive)
	}
}
