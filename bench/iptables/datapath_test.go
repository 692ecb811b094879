package iptables

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	offload "github.com/svcproxy/svcproxy/offload/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// The data path topology: client -- node -- 3 backends, veth pairs, routed.
//
//	client 198.19.10.2 --- 198.19.10.1 [node] 198.19.1x.1 --- 198.19.1x.2 backend x
//
// Each dataplane row has its own pair of ports, on the VIP and on the backends
// (rowPorts), so no two rows ever use the same 4-tuple. With one shared port, the
// backends (which close first) still held the direct rows' TIME_WAIT sockets when
// the NAT rows ran; a NAT'd SYN from a reused client port met one of them, the
// client reset the stale answer and sent its SYN again after the 1 s initial RTO:
// about one connection in 77 stalled, and the NAT rows' conn/s measured the stalls
// (docs/benchmarks.md, "Data path").
const (
	benchVIP  = "198.18.200.10" // outside Cluster(10000)'s 198.18.0.0-198.18.39.255
	basePort  = 8080            // row i: conn port basePort+2i (answers one byte and closes), bulk port +1
	bulkBytes = 256 << 20       // sent on the bulk port, then closed
)

// rowPorts are row i's conn and bulk ports, on the VIP as on the backends.
func rowPorts(i int) (conn, bulk uint16) {
	conn = basePort + uint16(2*i)
	return conn, conn + 1
}

type benchLab struct {
	node, client *netnstest.NS
	backends     []netip.Addr
	rows         []dataplane
}

func newBenchLab(b *testing.B) *benchLab {
	b.Helper()
	return newLabWith(b, []string{"iptables", "iptables-restore", "iptables-save", "sysctl"}, (*benchLab).dataplanes)
}

// newLabWith builds the topology (with tools required) and serves rows' ports on
// the backends.
func newLabWith(b *testing.B, tools []string, rows func(*benchLab) []dataplane) *benchLab {
	b.Helper()
	netnstest.RequireRoot(b, tools...)
	l := &benchLab{node: netnstest.New(b), client: netnstest.New(b)}
	l.node.Sysctl(b, "net.ipv4.ip_forward", "1")
	l.node.Sysctl(b, "net.ipv4.conf.all.send_redirects", "0")
	l.node.Sysctl(b, "net.ipv4.conf.default.send_redirects", "0")
	var backendNS []*netnstest.NS
	netnstest.Veth(b, l.node, "n-client", netip.MustParsePrefix("198.19.10.1/24"), l.client, "eth0", netip.MustParsePrefix("198.19.10.2/24"))
	l.client.Run(b, "ip", "route", "add", "default", "via", "198.19.10.1")
	for i := range 3 {
		ns := netnstest.New(b)
		gw := netip.AddrFrom4([4]byte{198, 19, byte(11 + i), 1})
		addr := netip.AddrFrom4([4]byte{198, 19, byte(11 + i), 2})
		netnstest.Veth(b, l.node, fmt.Sprintf("n-b%d", i), netip.PrefixFrom(gw, 24), ns, "eth0", netip.PrefixFrom(addr, 24))
		ns.Run(b, "ip", "route", "add", "default", "via", gw.String())
		l.backends = append(l.backends, addr)
		backendNS = append(backendNS, ns)
	}
	l.rows = rows(l)
	for _, ns := range backendNS {
		for _, dp := range l.rows {
			serve(b, ns, dp.conn, oneByte)
			serve(b, ns, dp.bulk, bulk)
		}
	}
	return l
}

func serve(b *testing.B, ns *netnstest.NS, port uint16, handle func(net.Conn)) {
	b.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() }) // stops acceptLoop
	go acceptLoop(ln, handle)
}

// acceptLoop is a backend server; it ends when its listener is closed.
func acceptLoop(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go handle(c) // ends when the client has read everything or hung up
	}
}

func oneByte(c net.Conn) {
	_, _ = c.Write([]byte{'x'})
	c.Close()
}

var zeros = make([]byte, 1<<20)

func bulk(c net.Conn) {
	defer c.Close()
	for sent := 0; sent < bulkBytes; sent += len(zeros) {
		if _, err := c.Write(zeros); err != nil {
			return
		}
	}
}

// dataplane is one way to get from the VIP (or a backend) to the backends.
type dataplane struct {
	name       string
	dst        string // the address the client dials, without port
	conn, bulk uint16 // this row's ports on dst and on the backends (rowPorts)
	install    func(b *testing.B, l *benchLab, dp dataplane)
	remove     func(b *testing.B, l *benchLab)
}

func (l *benchLab) dataplanes() []dataplane {
	none := func(*testing.B, *benchLab, dataplane) {}
	flushPrerouting := func(b *testing.B, l *benchLab) { l.node.Run(b, "iptables", "-t", "nat", "-F", "PREROUTING") }
	rows := []dataplane{
		{name: "direct", dst: l.backends[0].String(), install: none, remove: func(*testing.B, *benchLab) {}},
		// As direct, with connection tracking and NAT hooks active in the node
		// (any nat rule turns them on): the fair baseline for the NAT paths.
		{name: "direct-conntrack", dst: l.backends[0].String(), install: func(b *testing.B, l *benchLab, _ dataplane) {
			l.node.Run(b, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", "198.18.255.255/32", "-j", "ACCEPT")
		}, remove: flushPrerouting},
		{name: "dnat-by-hand", dst: benchVIP, install: handDNAT, remove: flushPrerouting},
		{name: "svcproxy-1-service", dst: benchVIP, install: svcproxyRules(0), remove: cleanup},
		{name: "svcproxy-10000-services", dst: benchVIP, install: svcproxyRulesFlushing(9999), remove: flushAll},
	}
	for i := range rows {
		rows[i].conn, rows[i].bulk = rowPorts(i)
	}
	return rows
}

// handDNAT is what one would write by hand for 3 backends: three rules.
func handDNAT(b *testing.B, l *benchLab, dp dataplane) {
	for i, be := range l.backends {
		args := []string{"-t", "nat", "-A", "PREROUTING", "-d", benchVIP, "-p", "tcp", "-m", "multiport", "--dports", fmt.Sprintf("%d,%d", dp.conn, dp.bulk)}
		if i < len(l.backends)-1 {
			args = append(args, "-m", "statistic", "--mode", "random", "--probability", fmt.Sprintf("%0.10f", 1/float64(len(l.backends)-i)))
		}
		l.node.Run(b, "iptables", append(args, "-j", "DNAT", "--to-destination", be.String())...)
	}
}

// svcproxyRules installs the bench service (the row's two ports to the 3
// backends) after others Services; "zzz" sorts last, so in SVCP-SERVICES a new
// connection passes every other Service's rule first (the worst case).
func svcproxyRules(others int) func(*testing.B, *benchLab, dataplane) {
	return func(b *testing.B, l *benchLab, dp dataplane) {
		svcs := Cluster(others).Services()
		sync(b, l.node, newDataplane(b), service.NewSnapshot(append(svcs, benchService(l, dp)), nil))
	}
}

// benchService is "zzz/bench": the row's conn and bulk ports on the VIP, to the
// same ports on the 3 backends.
func benchService(l *benchLab, dp dataplane) *service.Service {
	s := &service.Service{NamespacedName: service.NamespacedName{Namespace: "zzz", Name: "bench"},
		Type: service.TypeClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr(benchVIP)}}
	for _, port := range []uint16{dp.conn, dp.bulk} {
		p := &service.Port{Name: service.PortName{NamespacedName: s.NamespacedName, Port: fmt.Sprint(port), Protocol: service.TCP},
			Service: s, Port: port, Protocol: service.TCP}
		for _, be := range l.backends {
			p.Endpoints = append(p.Endpoints, service.Endpoint{Addr: netip.AddrPortFrom(be, port), Ready: true, Serving: true})
		}
		s.Ports = append(s.Ports, p)
	}
	return s
}

// svcproxyRulesFlushing loads the same rules as svcproxyRules, with the hooks,
// in one iptables-restore *without* --noflush (the node namespace has no other
// rules). With --noflush, iptables-nft 1.8.9 needs many minutes for 10,000
// services' rules (see the doc); the rules, and so the data path, are the same.
func svcproxyRulesFlushing(others int) func(*testing.B, *benchLab, dataplane) {
	return func(b *testing.B, l *benchLab, dp dataplane) {
		svcs := Cluster(others).Services()
		text, err := offload.Render(rulesConfig, service.NewSnapshot(append(svcs, benchService(l, dp)), nil))
		if err != nil {
			b.Fatal(err)
		}
		hooks := map[string]string{
			"*filter\n": "-A FORWARD -j SVCP-FORWARD\n-A FORWARD -j SVCP-SERVICES\n-A OUTPUT -j SVCP-SERVICES\n",
			"*nat\n":    "-A PREROUTING -j SVCP-SERVICES\n-A OUTPUT -j SVCP-SERVICES\n-A POSTROUTING -j SVCP-POSTROUTING\n",
		}
		s := string(text)
		for table, h := range hooks {
			i := strings.Index(s, table)
			j := i + strings.Index(s[i:], "COMMIT\n")
			s = s[:j] + h + s[j:]
		}
		cmd := l.node.Command(context.Background(), "iptables-restore")
		cmd.Stdin = strings.NewReader(s)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("iptables-restore: %v: %s", err, out)
		}
	}
}

func flushAll(b *testing.B, l *benchLab) {
	cmd := l.node.Command(context.Background(), "iptables-restore")
	cmd.Stdin = strings.NewReader("*nat\nCOMMIT\n*filter\nCOMMIT\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("iptables-restore: %v: %s", err, out)
	}
}

func cleanup(b *testing.B, l *benchLab) {
	ipt, err := kiptables.New(kiptables.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.node.Do(func() error { return offload.Cleanup(context.Background(), ipt) }); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDataPath: new connections per second (connect, read 1 byte, close;
// one at a time) and bulk throughput of one connection, per dataplane. The conn
// rows also report the client's SYN retransmissions and resets during their last
// run: a non-zero syn-retrans means 1 s stalls are in the figure (see rowPorts).
func BenchmarkDataPath(b *testing.B) {
	l := newBenchLab(b)
	b.Logf("client namespace: net.ipv4.tcp_tw_reuse=%s net.ipv4.ip_local_port_range=%s",
		strings.TrimSpace(l.client.Run(b, "sysctl", "-n", "net.ipv4.tcp_tw_reuse")),
		strings.Join(strings.Fields(l.client.Run(b, "sysctl", "-n", "net.ipv4.ip_local_port_range")), "-"))
	for _, dp := range l.rows {
		dp.install(b, l, dp)
		before := l.tcpStats(b)
		conns := 0
		b.Run("conn/"+dp.name, func(b *testing.B) {
			dst := net.JoinHostPort(dp.dst, fmt.Sprint(dp.conn))
			start := l.tcpStats(b)
			elapsed := l.connect(b, dst)
			d := l.tcpStats(b).sub(start)
			conns += b.N
			keep(b, map[string]float64{"conn/s": float64(b.N) / elapsed.Seconds(),
				"syn-retrans": float64(d.SynRetrans), "resets": float64(d.OutRsts)})
		})
		if d := l.tcpStats(b).sub(before); conns > 0 { // 0: the row is filtered out by -bench
			b.Logf("%s: %d connections (all runs and counts, port %d): %d SYN retransmissions, %d segments retransmitted, %d resets",
				dp.name, conns, dp.conn, d.SynRetrans, d.RetransSegs, d.OutRsts)
		}
		b.Run("bulk/"+dp.name, func(b *testing.B) {
			dst := net.JoinHostPort(dp.dst, fmt.Sprint(dp.bulk))
			n, elapsed := l.download(b, dst)
			keep(b, map[string]float64{"Gbit/s": float64(n) * 8 / 1e9 / elapsed.Seconds()})
		})
		dp.remove(b, l)
	}
}

func (l *benchLab) tcpStats(b *testing.B) tcpStats {
	b.Helper()
	s, err := readTCPStats(l.client)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// connect makes b.N connections to dst from the client, one at a time, each
// reading the server's one byte, and returns the time they took.
func (l *benchLab) connect(b *testing.B, dst string) time.Duration {
	b.Helper()
	start := time.Now()
	err := l.client.Do(func() error {
		buf := make([]byte, 1)
		for range b.N {
			c, err := net.DialTimeout("tcp4", dst, 3*time.Second)
			if err != nil {
				return err
			}
			_, err = io.ReadFull(c, buf)
			c.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// download reads b.N bulk transfers from dst, one at a time, and returns the
// bytes read and the time they took.
func (l *benchLab) download(b *testing.B, dst string) (int64, time.Duration) {
	b.Helper()
	var n int64
	start := time.Now()
	err := l.client.Do(func() error {
		for range b.N {
			c, err := net.DialTimeout("tcp4", dst, 3*time.Second)
			if err != nil {
				return err
			}
			m, err := io.Copy(io.Discard, c)
			c.Close()
			n += m
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n, time.Since(start)
}
