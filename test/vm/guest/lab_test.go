package guest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/kernel/link"
)

// The lab: a client and a backend namespace, each joined to a director namespace
// (the node, with IPVS) by a veth pair. Nothing routes out of it.
//
//	client 198.19.0.2-4/24 eth0 ── c0 198.19.0.1/24  director  b0 198.19.1.1/24 ── eth0 198.19.1.2-4/24 backend
//	                                                 svcp-ipvs0: service IPs
var (
	nodeIP     = netip.MustParseAddr("198.19.0.1")
	clientIPs  = addrs("198.19.0.2", "198.19.0.3", "198.19.0.4")
	backendIPs = addrs("198.19.1.2", "198.19.1.3", "198.19.1.4")
)

// backendPort is where every backend listens: it greets each connection with its own
// IP address and the client's address as it sees it ("198.19.1.2 198.19.0.2"), then
// echoes.
const backendPort = 8080

type lab struct {
	director, client, backend *netNS
	ipvs                      *kipvs.Kernel // in the director
	links                     *link.Netlink // in the director
}

// newLab builds the namespaces, links and backends, or skips without IPVS or root.
func newLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if err := kipvs.Available(); err != nil {
		t.Skipf("needs a kernel with IPVS (make test-ipvs runs these in a VM): %v", err)
	}
	l := &lab{director: newNetNS(t, "director"), client: newNetNS(t, "client"), backend: newNetNS(t, "backend")}
	veth(t, l.director, "c0", pfx(nodeIP, 24), l.client, []netip.Addr(clientIPs))
	veth(t, l.director, "b0", netip.MustParsePrefix("198.19.1.1/24"), l.backend, backendIPs)
	l.director.sysctl(t, "net/ipv4/ip_forward", "1")
	l.director.do(t, func() error {
		var err error
		if l.ipvs, err = kipvs.New(); err != nil {
			return err
		}
		l.links, err = link.New()
		return err
	})
	t.Cleanup(l.ipvs.Close)
	t.Cleanup(l.links.Close)
	for _, ip := range backendIPs {
		serve(t, l.backend, netip.AddrPortFrom(ip, backendPort))
	}
	return l
}

// netNS is a network namespace and the one OS thread that lives in it: do hands
// functions to that thread, so creating a socket inside costs no thread (threads are
// slow to make under TCG). The guest's busybox ip has no "netns": this is plain
// unshare(CLONE_NEWNET). The namespace goes away when its handle and sockets close.
type netNS struct {
	name string
	h    netns.NsHandle
	work chan func()
}

func newNetNS(t *testing.T, name string) *netNS {
	t.Helper()
	n := &netNS{name: name, work: make(chan func())}
	started := make(chan error)
	go n.run(started)
	if err := <-started; err != nil {
		t.Fatalf("netns %s: %v", name, err)
	}
	t.Cleanup(func() { close(n.work); n.h.Close() })
	n.do(t, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		// IPVS refuses real servers with EINVAL ("not unicast") while lo is down.
		return netlink.LinkSetUp(lo)
	})
	return n
}

// run is the namespace's thread: it unshares into a new namespace and runs work until
// the test's cleanup closes the channel. The thread is never unlocked, so it exits
// with the goroutine instead of going back to the scheduler in the wrong namespace.
func (n *netNS) run(started chan<- error) {
	runtime.LockOSThread()
	h, err := netns.New()
	n.h = h
	started <- err
	if err != nil {
		return
	}
	for fn := range n.work {
		fn()
	}
}

// do runs fn on the namespace's thread; sockets made there stay in the namespace.
func (n *netNS) do(t testing.TB, fn func() error) {
	t.Helper()
	done := make(chan error)
	n.work <- func() { done <- fn() }
	if err := <-done; err != nil {
		t.Fatalf("in netns %s: %v", n.name, err)
	}
}

func (n *netNS) sysctl(t *testing.T, key, value string) {
	t.Helper()
	n.do(t, func() error { return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644) })
}

// veth joins a (one address, dev aIf) and b (addresses on eth0, default route to a).
func veth(t *testing.T, a *netNS, aIf string, aAddr netip.Prefix, b *netNS, bAddrs []netip.Addr) {
	t.Helper()
	ha, err := netlink.NewHandleAt(a.h, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	hb, err := netlink.NewHandleAt(b.h, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	err = ha.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aIf}, PeerName: "eth0", PeerNamespace: netlink.NsFd(b.h)})
	must(t, err)
	la, err := ha.LinkByName(aIf)
	must(t, err)
	must(t, ha.AddrAdd(la, nlAddr(aAddr)))
	must(t, ha.LinkSetUp(la))
	lb, err := hb.LinkByName("eth0")
	must(t, err)
	for _, ip := range bAddrs {
		must(t, hb.AddrAdd(lb, nlAddr(pfx(ip, aAddr.Bits()))))
	}
	must(t, hb.LinkSetUp(lb))
	must(t, hb.RouteAdd(&netlink.Route{LinkIndex: lb.Attrs().Index, Gw: net.IP(aAddr.Addr().AsSlice())}))
}

// serve starts a backend on addr: greet with the address, then echo. Stopped at cleanup.
func serve(t *testing.T, ns *netNS, addr netip.AddrPort) {
	t.Helper()
	var ln net.Listener
	ns.do(t, func() (err error) { ln, err = net.Listen("tcp", addr.String()); return err })
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() { defer wg.Done(); acceptLoop(ln, addr.Addr(), &wg) }()
}

func acceptLoop(ln net.Listener, self netip.Addr, wg *sync.WaitGroup) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return // listener closed
		}
		wg.Add(1)
		go func() { defer wg.Done(); greetAndEcho(c, self) }()
	}
}

func greetAndEcho(c net.Conn, self netip.Addr) {
	defer c.Close()
	// A test that forgets a connection does not hang cleanup. Three minutes,
	// not one: under TCG on a loaded host the hybrid test's connection opened
	// before the promotion waited over a minute for it and was closed here.
	c.SetDeadline(time.Now().Add(3 * time.Minute))
	peer, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	if _, err := fmt.Fprintf(c, "%s %s\n", self, peer.Addr()); err != nil {
		return
	}
	io.Copy(c, c)
}

// conn is a client connection through a virtual server, the backend it reached, and
// the source address the backend saw (the client's, or the node's when masqueraded).
type conn struct {
	net.Conn
	r       *bufio.Reader
	backend string
	peer    string
}

// dial connects from the client namespace, from src, to dst and reads the greeting.
func (l *lab) dial(t *testing.T, src netip.Addr, dst netip.AddrPort) *conn {
	t.Helper()
	return dialFrom(t, l.client, src, dst)
}

// dialFrom connects from a namespace, from src (any when not valid), to dst and reads
// the greeting.
func dialFrom(t *testing.T, ns *netNS, src netip.Addr, dst netip.AddrPort) *conn {
	t.Helper()
	var c net.Conn
	ns.do(t, func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		if src.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
		}
		c, err = d.DialContext(context.Background(), "tcp", dst.String())
		return err
	})
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("%s -> %s: greeting: %v", src, dst, err)
	}
	backend, peer, _ := strings.Cut(strings.TrimSpace(line), " ")
	return &conn{Conn: c, r: r, backend: backend, peer: peer}
}

// echo checks that the connection still carries data both ways.
func (c *conn) echo(t *testing.T) {
	t.Helper()
	// A deadline of its own: the one set at dial time has passed when the
	// connection is checked after a promotion, which takes a while in the VM.
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatalf("connection to %s: write: %v", c.backend, err)
	}
	if line, err := c.r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("connection to %s: echo = %q, %v", c.backend, line, err)
	}
}

// spread makes n sequential connections (each closed before the next) and counts
// them per backend.
func (l *lab) spread(t *testing.T, src netip.Addr, dst netip.AddrPort, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		c := l.dial(t, src, dst)
		got[c.backend]++
		c.Close()
	}
	return got
}

func formatSpread(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// realServer reads one real server from the kernel; ok is false when it is gone.
func (l *lab) realServer(t *testing.T, vs kipvs.Key, addr netip.AddrPort) (kipvs.RealServer, bool) {
	t.Helper()
	rss, err := l.ipvs.RealServers(context.Background(), vs)
	if errors.Is(err, kipvs.ErrNotExist) {
		return kipvs.RealServer{}, false
	}
	must(t, err)
	for _, rs := range rss {
		if rs.Addr == addr {
			return rs, true
		}
	}
	return kipvs.RealServer{}, false
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func pfx(ip netip.Addr, bits int) netip.Prefix { return netip.PrefixFrom(ip, bits) }

func nlAddr(p netip.Prefix) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
