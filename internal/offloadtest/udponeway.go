package offloadtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// CheckUDPOneWayToZero: a one-way UDP sender (a statsd client: it sends at a
// steady pace and never reads, so its conntrack entry stays [UNREPLIED] and
// every datagram refreshes it) keeps sending to a Service whose endpoints go
// to zero. The entry that leads to the endpoint it had must go, so that its
// next datagrams meet the REJECT of a port without endpoints (the client's
// socket is refused) instead of the old endpoint (kubernetes#139628, fixed in
// kube-proxy by kubernetes#139629). Twice:
//
//   - live: the Dataplane that served the endpoints syncs the port without
//     them (a partial sync, for the modes that have them);
//   - restart: a new Dataplane's first sync finds the port without endpoints
//     and the entry an earlier process left.
//
// newMode makes a new Dataplane (a new process, as far as conntrack cleanup
// knows) and returns its Sync. fam is as for CheckUDPConntrack. The backend
// still runs throughout, so only the entry decides where the datagrams go.
func (l *Lab) CheckUDPOneWayToZero(t *testing.T, newMode func() Sync, fam service.Family) {
	t.Helper()
	sink := l.ServeUDPSink(t, 5353)
	endpoints, vip, opts := l.Endpoints, netip.MustParseAddrPort("198.18.0.53:53"), []st.Opt{st.WithProtocol(service.UDP)}
	if fam == service.IPv6 {
		endpoints, vip = l.Endpoints6, netip.MustParseAddrPort("[2001:db8:18::53]:53")
		opts = append(opts, st.WithDualStack("2001:db8:18::53"))
	}
	dns := func(eps []service.Endpoint) *service.Snapshot {
		return st.Snapshot(st.Service("dns", "198.18.0.53", 53, eps, opts...)).Family(fam)
	}
	backends := map[string]netip.Addr{}
	for i, e := range endpoints(5353) {
		backends[fmt.Sprintf("b%d", i)] = e.Addr.Addr()
	}
	// toZero starts a sender, waits for its first datagram to reach a
	// backend, lets zero take the endpoints away, and checks where the
	// sender's datagrams go then. deleted is the Health's count before.
	toZero := func(name string, deleted uint64, zero func() kernelsync.Health) {
		t.Helper()
		s := StartUDPSender(t, l.Client, vip.String(), 20*time.Millisecond)
		defer s.Stop()
		backend, err := sink.WaitFor(s.Local(), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h := zero()
		if h.ConntrackDeleted <= deleted || h.ConntrackErrors != 0 {
			t.Errorf("%s: health %+v: want %s conntrack entries deleted without errors", name, h, fam)
		}
		select {
		case <-s.Refused():
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the one-way sender was not refused 10s after its Service lost its endpoints: its datagrams still go to %s (%d received; the %s conntrack entry was not deleted?)",
				name, backend, sink.Count(backend), fam)
		}
		// The entry to the old endpoint is gone for good: the datagrams the
		// sender kept sending made none (they are rejected, never confirmed).
		var n int
		err = l.Node.Do(func() (err error) {
			n, err = conntrack.Netlink{}.Delete(context.Background(), conntrack.Filter{Protocol: "udp", OrigDst: vip.Addr(), OrigDstPort: vip.Port(), DstNAT: backends[backend]})
			return err
		})
		if err != nil || n != 0 {
			t.Errorf("%s: conntrack entries %s -> %s left: %d (%v), want none", name, vip, backends[backend], n, err)
		}
	}

	live := newMode()
	h := live(dns(endpoints(5353)))
	toZero("live", h.ConntrackDeleted, func() kernelsync.Health { return live(dns(nil)) })

	live(dns(endpoints(5353)))
	toZero("restart", 0, func() kernelsync.Health { return newMode()(dns(nil)) })
}

// UDPSink counts, in each backend, the datagrams a port receives, and answers
// none of them.
type UDPSink struct {
	mu     sync.Mutex
	first  map[netip.AddrPort]string        // client -> the backend its first datagram reached
	seen   map[netip.AddrPort]chan struct{} // closed once first has the client
	counts map[string]int                   // backend -> datagrams
}

// ServeUDPSink runs a UDPSink on port in every backend until the test ends.
func (l *Lab) ServeUDPSink(t *testing.T, port uint16) *UDPSink {
	t.Helper()
	s := &UDPSink{first: map[netip.AddrPort]string{}, seen: map[netip.AddrPort]chan struct{}{}, counts: map[string]int{}}
	for i, b := range l.Backends {
		var pc *net.UDPConn
		if err := b.Do(func() (err error) {
			pc, err = net.ListenUDP("udp", &net.UDPAddr{Port: int(port)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() }) // stops serve
		go s.serve(pc, fmt.Sprintf("b%d", i))
	}
	return s
}

func (s *UDPSink) serve(pc *net.UDPConn, name string) {
	buf := make([]byte, 512)
	for {
		_, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		s.mu.Lock()
		s.counts[name]++
		if _, ok := s.first[from]; !ok {
			s.first[from] = name
			close(s.seenLocked(from))
		}
		s.mu.Unlock()
	}
}

func (s *UDPSink) seenLocked(client netip.AddrPort) chan struct{} {
	c := s.seen[client]
	if c == nil {
		c = make(chan struct{})
		s.seen[client] = c
	}
	return c
}

// WaitFor returns the backend that got client's first datagram, once one has.
func (s *UDPSink) WaitFor(client netip.AddrPort, timeout time.Duration) (string, error) {
	s.mu.Lock()
	c := s.seenLocked(client)
	s.mu.Unlock()
	select {
	case <-c:
	case <-time.After(timeout):
		return "", fmt.Errorf("no datagram of %s reached a backend in %s", client, timeout)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first[client], nil
}

// Count is the number of datagrams backend has received.
func (s *UDPSink) Count(backend string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[backend]
}

// UDPSender sends a datagram every interval from one connected socket (one
// conntrack flow) and never reads. An ICMP port unreachable for one of its
// datagrams fails a later write with ECONNREFUSED: Refused is closed then.
type UDPSender struct {
	c       *net.UDPConn
	refused chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
}

// StartUDPSender starts a sender in ns to dst; it stops when the test ends,
// or at Stop.
func StartUDPSender(t *testing.T, ns *netnstest.NS, dst string, interval time.Duration) *UDPSender {
	t.Helper()
	var c *net.UDPConn
	if err := ns.Do(func() error {
		nc, err := net.Dial("udp", dst)
		if err == nil {
			c = nc.(*net.UDPConn)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &UDPSender{c: c, refused: make(chan struct{}), stop: cancel, done: make(chan struct{})}
	go s.run(ctx, interval)
	t.Cleanup(s.Stop)
	return s
}

// run is the sender's loop: a datagram per tick, counting on, whatever
// happened to the last one.
func (s *UDPSender) run(ctx context.Context, interval time.Duration) {
	defer close(s.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	refused := false
	for seq := 0; ; seq++ {
		_, err := s.c.Write(fmt.Appendf(nil, "one-way %d", seq))
		if errors.Is(err, syscall.ECONNREFUSED) && !refused {
			refused = true
			close(s.refused)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Local is the sender's address: the source its datagrams arrive from
// (ClusterIP traffic from a pod is not masqueraded).
func (s *UDPSender) Local() netip.AddrPort {
	a := s.c.LocalAddr().(*net.UDPAddr).AddrPort()
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// Refused is closed once a write of the sender was refused.
func (s *UDPSender) Refused() <-chan struct{} { return s.refused }

// Stop stops the sender and closes its socket; it may be called again.
func (s *UDPSender) Stop() {
	s.stop()
	<-s.done
	s.c.Close()
}
