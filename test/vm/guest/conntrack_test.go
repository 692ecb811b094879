package guest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/offload/ipvs"
	"github.com/svcproxy/svcproxy/service"
)

// TestOffloadUDPOneWayToZero: a one-way UDP sender (it sends at a steady pace
// and never reads, as a statsd client does) to a Service whose endpoints go
// to zero, through IPVS. With net.ipv4.vs.conntrack=1 (svcproxy sets it when
// it masquerades) its conntrack entry's reply comes from the real server, and
// every datagram keeps the entry alive. After the sync that takes the last
// real server away no entry of the sender may lead to it any more, and the
// sender is refused (IPVS has no real server to give it); twice, as
// internal/offloadtest's CheckUDPOneWayToZero does for the rule modes: in a
// sync of the running Dataplane, and at the first sync of a new one, which
// finds the entry an earlier process left (kubernetes#139629).
//
// Unlike the rule modes' check, this one also passes without the Dataplane's
// conntrack cleanup (tried: with staleSelection leaving frontends without
// real servers out): the sync deletes the UDP real server at once, the
// sender's next datagram expires its IPVS connection (expire_nodest_conn=1,
// as svcproxy sets it), and IPVS drops the conntrack entry with it. It is
// the end-to-end behaviour of the IPVS path that it holds; the cleanup's
// own part is offload/ipvs's TestSyncConntrackEndpointsToZero.
func TestOffloadUDPOneWayToZero(t *testing.T) {
	l := newLab(t)
	// A namespace tracks connections only once a rule needs it: svcproxy's
	// masquerade rules do; this one stands in for them.
	l.director.output(t, "iptables", "-t", "nat", "-A", "POSTROUTING", "-m", "conntrack", "--ctstate", "DNAT", "-j", "RETURN")
	l.director.sysctl(t, "net/ipv4/vs/conntrack", "1")
	l.director.sysctl(t, "net/ipv4/vs/expire_nodest_conn", "1")
	udpVIP := netip.AddrPortFrom(webVIP.Addr(), 53)
	backend := backendIPs[0]
	first := sinkUDP(t, l.backend, netip.AddrPortFrom(backend, backendPort))
	newProxier := func() *ipvs.Dataplane {
		p, err := ipvs.New(ipvs.Config{IPVS: l.ipvs, Links: l.links, Node: dataplane.Node{NodePortIPs: []netip.Addr{nodeIP}},
			Now: time.Now, GracePeriod: time.Minute, Conntrack: conntrack.Netlink{}})
		must(t, err)
		t.Cleanup(func() { p.Cleanup(context.Background()) })
		return p
	}
	sync := func(p *ipvs.Dataplane, snap *service.Snapshot) {
		t.Helper()
		// The conntrack cleanup acts in the calling thread's namespace.
		l.director.do(t, func() error { return p.Sync(context.Background(), snap) })
	}
	toZero := func(name string, zero func()) {
		t.Helper()
		s := startSender(t, l.client, udpVIP)
		defer s.stop()
		select {
		case src := <-first:
			if src != s.src {
				t.Fatalf("%s: the backend first heard from %s, want the sender %s", name, src, s.src)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no datagram of the sender %s reached %s", name, s.src, backend)
		}
		if !l.hasEntryTo(t, s.src, backend) {
			t.Fatalf("%s: no conntrack entry %s -> %s with the real server's reply: the test proves nothing", name, s.src, backend)
		}
		zero()
		if l.hasEntryTo(t, s.src, backend) {
			t.Errorf("%s: after the sync without endpoints, the sender's conntrack entry still leads to %s", name, backend)
		}
		select {
		case <-s.refused:
		case <-time.After(30 * time.Second):
			t.Errorf("%s: the one-way sender was not refused 30s after its Service lost its endpoints", name)
		}
	}

	live := newProxier()
	sync(live, webService([]netip.Addr{backend}))
	toZero("live", func() { sync(live, webService(nil)) })
	sync(live, webService([]netip.Addr{backend}))
	toZero("restart", func() { sync(newProxier(), webService(nil)) })
}

// sinkUDP reads datagrams on addr in ns, answering none, until the test ends;
// it sends each new client's address on the channel it returns.
func sinkUDP(t *testing.T, ns *netNS, addr netip.AddrPort) <-chan netip.AddrPort {
	t.Helper()
	var pc *net.UDPConn
	ns.do(t, func() (err error) { pc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr)); return err })
	t.Cleanup(func() { pc.Close() })
	out := make(chan netip.AddrPort, 4)
	go func() { // the one-way backend
		seen := map[netip.AddrPort]bool{}
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return // closed
			}
			if from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port()); !seen[from] {
				seen[from] = true
				out <- from
			}
		}
	}()
	return out
}

// sender writes a datagram every 20 ms from one socket in the client and
// never reads; refused is closed once a write fails with ECONNREFUSED (an
// ICMP port unreachable for an earlier one).
type sender struct {
	src     netip.AddrPort
	refused chan struct{}
	stop    func()
}

func startSender(t *testing.T, ns *netNS, dst netip.AddrPort) *sender {
	t.Helper()
	var c *net.UDPConn
	ns.do(t, func() (err error) { c, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst)); return err })
	s := &sender{src: c.LocalAddr().(*net.UDPAddr).AddrPort(), refused: make(chan struct{})}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		refused := false
		for {
			if _, err := c.Write([]byte("one-way")); errors.Is(err, syscall.ECONNREFUSED) && !refused {
				refused = true
				close(s.refused)
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	stopped := false
	s.stop = func() {
		if !stopped {
			stopped = true
			close(quit)
			<-done
			c.Close()
		}
	}
	t.Cleanup(s.stop)
	return s
}

// hasEntryTo reports whether the director's conntrack table has a UDP entry
// from src whose reply comes from real.
func (l *lab) hasEntryTo(t *testing.T, src netip.AddrPort, real netip.Addr) bool {
	t.Helper()
	var entries []offloadtest.UDPEntry
	l.director.do(t, func() (err error) { entries, err = offloadtest.UDPEntries(); return err })
	return slices.ContainsFunc(entries, func(e offloadtest.UDPEntry) bool { return e.Src == src && e.ReplySrc == real })
}
