package userspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/service"
)

// TestEstablishedConnectionsSurvive: a connection keeps its endpoint when the
// endpoint turns not-ready, leaves the slice, or the Service is deleted, as
// kube-proxy's userspace proxier (and the kernel paths, through conntrack)
// leave them. Only new connections avoid the endpoint.
func TestEstablishedConnectionsSurvive(t *testing.T) {
	a := startTCPBackend(t, direct, "a", "127.0.0.1:0", echo)
	b := startTCPBackend(t, direct, "b", "127.0.0.1:0", echo)
	both := webSpec(service.Affinity{}, a.addr.String(), b.addr.String())
	tests := []struct {
		name  string
		after *service.Snapshot
		next  string // the backend of the next new connection, "" for refused
	}{
		{"endpoint not ready", snapshotOf(t, webSpec(service.Affinity{}, "!"+a.addr.String(), b.addr.String())), "b:"},
		{"endpoint removed", snapshotOf(t, webSpec(service.Affinity{}, b.addr.String())), "b:"},
		{"no endpoints left", snapshotOf(t, webSpec(service.Affinity{})), ""},
		{"service deleted", snapshotOf(t), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startProxier(t, Config{})
			mustSync(t, p, snapshotOf(t, both))
			addr := listenerAddr(t, p, "default/web:http")
			toA := dialEcho(t, addr, "a:")
			mustSync(t, p, tt.after)

			for _, msg := range []string{"still", "here"} {
				if got := echoRoundTrip(t, toA, msg); got != msg {
					t.Fatalf("established connection to a after %s: echoed %q, want %q", tt.name, got, msg)
				}
			}
			if tt.next == "" {
				return
			}
			dialEcho(t, addr, tt.next)
		})
	}
}

// echoRoundTrip writes msg on c and reads as many bytes back.
func echoRoundTrip(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(buf)
}

// TestAbortIsAReset: when the endpoint resets its side, the client is reset too,
// not given a clean end of stream that would look like a complete reply.
func TestAbortIsAReset(t *testing.T) {
	resetAfterGreeting := func(name string, c net.Conn) {
		io.WriteString(c, name+":")
		buf := make([]byte, 1)
		c.Read(buf) // the client's signal
		reset(c.(*net.TCPConn))
	}
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", resetAfterGreeting)
	p := startProxier(t, Config{})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
	c := dialEcho(t, listenerAddr(t, p, "default/web:http"), "a:")
	io.WriteString(c, "x")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after the endpoint's reset: read %q, %v; want a reset", b, err)
	}
}

// TestAddingEndpointsLosesNoConnection: while a Sync adds endpoints, every
// connection reaches one. A Balancer that offers a new endpoint before the
// proxier's own state knows it used to close such connections (an empty
// reply). Many other ports widen the window a Sync spends between the two.
func TestAddingEndpointsLosesNoConnection(t *testing.T) {
	const steps, others = 40, 500
	var eps []string
	for i := range steps {
		eps = append(eps, startTCPBackend(t, direct, fmt.Sprint(i), "127.0.0.1:0", sayName).addr.String())
	}
	snap := func(n int) *service.Snapshot {
		specs := []svcSpec{{name: "zzz/web", port: "http", clusterIP: "198.18.0.10", svcPort: 80, endpoints: eps[:n]}}
		for i := range others {
			specs = append(specs, svcSpec{name: fmt.Sprintf("default/other-%d", i), port: "http",
				clusterIP: fmt.Sprintf("198.18.1.%d", i%250), svcPort: uint16(1000 + i), endpoints: eps[:1]})
		}
		return snapshotOf(t, specs...)
	}
	p := startProxier(t, Config{})
	mustSync(t, p, snap(1))
	addr := listenerAddr(t, p, "zzz/web:http")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var conns, failures atomic.Int64
	var firstErr atomic.Value
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s, err := readAll(t, addr)
				conns.Add(1)
				if err != nil || s == "" {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("read %q, %v", s, err))
				}
			}
		})
	}
	for n := 2; n <= steps; n++ {
		before := conns.Load()
		mustSync(t, p, snap(n))
		eventually(t, "a few connections after the sync", func() bool { return conns.Load() >= before+20 })
	}
	close(stop)
	wg.Wait()
	if f := failures.Load(); f > 0 {
		t.Errorf("%d of %d connections failed while endpoints were only added; first: %v", f, conns.Load(), firstErr.Load())
	}
}

// TestShutdownCancelsDials: the grace period bounds Shutdown, also for a
// connection whose endpoint does not answer (its dial would take the dial
// timeouts' sum).
func TestShutdownCancelsDials(t *testing.T) {
	silent := silentEndpoint(t)
	p := NewProxier(Config{DialTimeouts: []time.Duration{time.Hour}})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, silent.String())))
	c, err := net.Dial("tcp", listenerAddr(t, p, "default/web:http"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(t, "the proxier is dialling", func() bool {
		return p.Stats()[portName("default/web", "http", service.TCP)].ConnectionsActive == 1
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the grace period is over at once
	done := make(chan error, 1)
	go func() { done <- p.Shutdown(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Shutdown: %v, want the grace period's end", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Shutdown did not return: a dial outlived the grace period")
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the client of the cut dial: read %q, %v; want a reset", b, err)
	}
}

// silentEndpoint returns a loopback address whose listener never completes a
// handshake: its accept queue (backlog 0) is full, so the kernel drops SYNs.
func silentEndpoint(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "silent listener")
	t.Cleanup(func() { f.Close() })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(netip.AddrFrom4(sa.(*unix.SockaddrInet4).Addr), uint16(sa.(*unix.SockaddrInet4).Port))
	filler, err := net.Dial("tcp4", addr.String()) // fills the queue
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	return addr
}

// TestShutdownWhileAccepting: connections keep arriving while Shutdown starts.
// Each one is either refused or reset before it carries anything, or waited
// for and finished: none is accepted and then forgotten. (Most telling under
// the race detector: registering a connection used to race Shutdown's wait.)
func TestShutdownWhileAccepting(t *testing.T) {
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", echo)
	for round := range 5 {
		p := NewProxier(Config{})
		mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
		addr := listenerAddr(t, p, "default/web:http")
		var wg sync.WaitGroup
		var finished, refused atomic.Int64
		var bad atomic.Value
		for range 8 {
			wg.Go(func() {
				for range 50 {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						refused.Add(1)
						continue
					}
					c.SetDeadline(time.Now().Add(20 * time.Second))
					buf := make([]byte, 4)
					_, err = io.ReadFull(c, buf[:2]) // "a:"
					if err == nil {
						io.WriteString(c, "ping")
						_, err = io.ReadFull(c, buf)
						if err == nil {
							finished.Add(1)
						} else {
							bad.CompareAndSwap(nil, fmt.Sprintf("greeted, then %v", err))
						}
					} else if errors.Is(err, syscall.ECONNRESET) {
						refused.Add(1)
					} else { // an EOF would be an empty reply
						bad.CompareAndSwap(nil, fmt.Sprintf("before the greeting: %v", err))
					}
					c.Close()
				}
			})
		}
		eventually(t, "some connections are through", func() bool { return finished.Load() > 10 })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := p.Shutdown(ctx)
		cancel()
		wg.Wait()
		if err != nil {
			t.Errorf("round %d: Shutdown: %v, want every connection finished within the grace period", round, err)
		}
		if b := bad.Load(); b != nil {
			t.Errorf("round %d: a connection was cut after it started: %v", round, b)
		}
	}
}

// TestShutdownRacesAccept races Accept against Shutdown, many times over, with
// no pause anywhere: clients dial as fast as they can and hold each proxied
// connection open, and Shutdown (with its grace period already over) starts
// as soon as the first connection is through. Whatever the interleaving, every
// connection the listener accepted must end in a reset by the time Shutdown has
// returned: refused at registration, or registered and then reset with the
// rest. Registering with a sync.WaitGroup (Add after Accept, Wait in Shutdown)
// fails here under the race detector, in every run of 200 rounds: Add from
// zero races the Wait that Shutdown began. Without -race that registration
// passed 6,000 rounds (its harm, a dial that beats the cancel and leaves a
// connection nobody resets, is rare), so `make test` runs this test again
// with -race.
func TestShutdownRacesAccept(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 20
	}
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", echo)
	spec := snapshotOf(t, webSpec(service.Affinity{}, be.addr.String()))
	var accepted, refused int64
	for round := range rounds {
		p := NewProxier(Config{})
		mustSync(t, p, spec)
		addr := listenerAddr(t, p, "default/web:http")

		through := make(chan struct{}) // closed when a first connection is proxied
		var once sync.Once
		var clients sync.WaitGroup
		var held, cut atomic.Int64
		var bad atomic.Value
		for range 8 {
			clients.Go(func() {
				for { // until the closed listener refuses
					c, err := net.Dial("tcp", addr)
					if err != nil {
						return
					}
					held.Add(1)
					buf := make([]byte, 16)
					_, err = io.ReadFull(c, buf[:2]) // "a:": proxied
					if err == nil {
						once.Do(func() { close(through) })
						_, err = c.Read(buf) // held until the proxy ends it
					}
					switch {
					case errors.Is(err, syscall.ECONNRESET):
						cut.Add(1)
					default: // EOF: a clean end, which looks like a complete reply
						bad.CompareAndSwap(nil, fmt.Sprintf("held connection ended with %v, want a reset", err))
					}
					c.Close()
				}
			})
		}
		<-through
		graceOver, cancel := context.WithCancel(context.Background())
		cancel()
		shut := make(chan error, 1)
		go func() { shut <- p.Shutdown(graceOver) }()
		select {
		case err := <-shut:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: Shutdown: %v", round, err)
			}
		case <-time.After(time.Minute): // a hang detector, not a timing assertion
			t.Fatalf("round %d: Shutdown still waits a minute after its grace period: "+
				"a connection accepted during Shutdown was neither refused nor reset (%d open)", round, p.conns.len())
		}
		if n := p.conns.len(); n != 0 {
			t.Fatalf("round %d: %d connections still registered after Shutdown returned", round, n)
		}
		clientsDone := make(chan struct{})
		go func() { clients.Wait(); close(clientsDone) }()
		select {
		case <-clientsDone:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: a client still holds a proxied connection a minute after Shutdown returned", round)
		}
		if b := bad.Load(); b != nil {
			t.Fatalf("round %d: %v", round, b)
		}
		accepted += held.Load()
		refused += cut.Load()
	}
	t.Logf("%d rounds: %d connections opened while Shutdown raced Accept, each ended by a reset (%d)", rounds, accepted, refused)
}
