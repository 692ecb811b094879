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
const (
	benchVIP  = "198.18.200.10" // outside Cluster(10000)'s 198.18.0.0-198.18.39.255
	connPort  = 8080            // answers one byte and closes
	bulkPort  = 8081            // sends bulkBytes and closes
	bulkBytes = 256 << 20
)

type benchLab struct {
	node, client *netnstest.NS
	backends     []netip.Addr
}

func newBenchLab(b *testing.B) *benchLab {
	b.Helper()
	netnstest.RequireRoot(b, "iptables", "iptables-restore", "iptables-save", "sysctl")
	l := &benchLab{node: netnstest.New(b), client: netnstest.New(b)}
	l.node.Sysctl(b, "net.ipv4.ip_forward", "1")
	l.node.Sysctl(b, "net.ipv4.conf.all.send_redirects", "0")
	l.node.Sysctl(b, "net.ipv4.conf.default.send_redirects", "0")
	netnstest.Veth(b, l.node, "n-client", netip.MustParsePrefix("198.19.10.1/24"), l.client, "eth0", netip.MustParsePrefix("198.19.10.2/24"))
	l.client.Run(b, "ip", "route", "add", "default", "via", "198.19.10.1")
	for i := range 3 {
		ns := netnstest.New(b)
		gw := netip.AddrFrom4([4]byte{198, 19, byte(11 + i), 1})
		addr := netip.AddrFrom4([4]byte{198, 19, byte(11 + i), 2})
		netnstest.Veth(b, l.node, fmt.Sprintf("n-b%d", i), netip.PrefixFrom(gw, 24), ns, "eth0", netip.PrefixFrom(addr, 24))
		ns.Run(b, "ip", "route", "add", "default", "via", gw.String())
		l.backends = append(l.backends, addr)
		serve(b, ns, connPort, oneByte)
		serve(b, ns, bulkPort, bulk)
	}
	return l
}

func serve(b *testing.B, ns *netnstest.NS, port int, handle func(net.Conn)) {
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
	name    string
	dst     string // the address the client dials, without port
	install func(b *testing.B, l *benchLab)
	remove  func(b *testing.B, l *benchLab)
}

func (l *benchLab) dataplanes() []dataplane {
	none := func(*testing.B, *benchLab) {}
	return []dataplane{
		{"direct", l.backends[0].String(), none, none},
		// As direct, with connection tracking and NAT hooks active in the node
		// (any nat rule turns them on): the fair baseline for the NAT paths.
		{"direct-conntrack", l.backends[0].String(), func(b *testing.B, l *benchLab) {
			l.node.Run(b, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", "198.18.255.255/32", "-j", "ACCEPT")
		}, func(b *testing.B, l *benchLab) { l.node.Run(b, "iptables", "-t", "nat", "-F", "PREROUTING") }},
		{"dnat-by-hand", benchVIP, handDNAT, func(b *testing.B, l *benchLab) { l.node.Run(b, "iptables", "-t", "nat", "-F", "PREROUTING") }},
		{"svcproxy-1-service", benchVIP, svcproxyRules(0), cleanup},
		{"svcproxy-10000-services", benchVIP, svcproxyRulesFlushing(9999), flushAll},
	}
}

// handDNAT is what one would write by hand for 3 backends: three rules.
func handDNAT(b *testing.B, l *benchLab) {
	for i, be := range l.backends {
		args := []string{"-t", "nat", "-A", "PREROUTING", "-d", benchVIP, "-p", "tcp", "-m", "multiport", "--dports", "8080,8081"}
		if i < len(l.backends)-1 {
			args = append(args, "-m", "statistic", "--mode", "random", "--probability", fmt.Sprintf("%0.10f", 1/float64(len(l.backends)-i)))
		}
		l.node.Run(b, "iptables", append(args, "-j", "DNAT", "--to-destination", be.String())...)
	}
}

// svcproxyRules installs the bench service (ports 8080 and 8081 to the 3
// backends) after others Services; "zzz" sorts last, so in SVCP-SERVICES a new
// connection passes every other Service's rule first (the worst case).
func svcproxyRules(others int) func(*testing.B, *benchLab) {
	return func(b *testing.B, l *benchLab) {
		svcs := Cluster(others).Services()
		sync(b, l.node, newProxier(b), service.NewSnapshot(append(svcs, benchService(l)), nil))
	}
}

// benchService is "zzz/bench": ports 8080 and 8081 on the VIP, to the 3 backends.
func benchService(l *benchLab) *service.Service {
	s := &service.Service{NamespacedName: service.NamespacedName{Namespace: "zzz", Name: "bench"},
		Type: service.TypeClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr(benchVIP)}}
	for _, port := range []uint16{connPort, bulkPort} {
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
func svcproxyRulesFlushing(others int) func(*testing.B, *benchLab) {
	return func(b *testing.B, l *benchLab) {
		svcs := Cluster(others).Services()
		text, err := offload.Render(rulesConfig, service.NewSnapshot(append(svcs, benchService(l)), nil))
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
// one at a time) and bulk throughput of one connection, per dataplane.
func BenchmarkDataPath(b *testing.B) {
	l := newBenchLab(b)
	for _, dp := range l.dataplanes() {
		dp.install(b, l)
		b.Run("conn/"+dp.name, func(b *testing.B) {
			dst := net.JoinHostPort(dp.dst, fmt.Sprint(connPort))
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
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "conn/s")
		})
		b.Run("bulk/"+dp.name, func(b *testing.B) {
			dst := net.JoinHostPort(dp.dst, fmt.Sprint(bulkPort))
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
			b.ReportMetric(float64(n)*8/1e9/time.Since(start).Seconds(), "Gbit/s")
		})
		dp.remove(b, l)
	}
}
