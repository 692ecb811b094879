package iptables

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// lab is a node namespace routing between a client namespace and three backend
// namespaces over veth pairs (no bridge, so no br_netfilter trap):
//
//	client 198.19.10.2 --- 198.19.10.1 [node] 198.19.1x.1 --- 198.19.1x.2 backend x (x = 1..3)
//
// The pod network (ClusterCIDR) is 198.19.8.0/21, so the client is a "pod" and its
// ClusterIP traffic keeps its address. The node's address is 198.19.10.1.
type lab struct {
	node, client *netnstest.NS
	backends     []*netnstest.NS
	cfg          Config
}

var (
	labClient = netip.MustParseAddr("198.19.10.2")
)

func backendAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, byte(11 + i), 2}) }

func newLab(t *testing.T) *lab {
	t.Helper()
	netnstest.RequireRoot(t, "iptables", "iptables-restore", "iptables-save", "sysctl")
	l := &lab{node: netnstest.New(t), client: netnstest.New(t),
		cfg: Config{NodeName: thisNode, ClusterCIDR: netip.MustParsePrefix("198.19.8.0/21")}}
	l.node.Sysctl(t, "net.ipv4.ip_forward", "1")
	// The node sends VIP traffic back out the interface it came in on when the
	// endpoint is the client's neighbour; redirects would eat REJECT's ICMP budget.
	// (The interface's value counts too: "all" OR "<if>", so set "default"
	// before the veths exist.)
	l.node.Sysctl(t, "net.ipv4.conf.all.send_redirects", "0")
	l.node.Sysctl(t, "net.ipv4.conf.default.send_redirects", "0")
	netnstest.Veth(t, l.node, "n-client", netip.MustParsePrefix("198.19.10.1/24"), l.client, "eth0", netip.MustParsePrefix("198.19.10.2/24"))
	l.client.Run(t, "ip", "route", "add", "default", "via", "198.19.10.1")
	for i := range 3 {
		b := netnstest.New(t)
		node := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(11 + i), 1}), 24)
		netnstest.Veth(t, l.node, fmt.Sprintf("n-b%d", i), node, b, "eth0", netip.PrefixFrom(backendAddr(i), 24))
		b.Run(t, "ip", "route", "add", "default", "via", node.Addr().String())
		l.backends = append(l.backends, b)
	}
	// A locally generated packet needs a route before netfilter sees it.
	l.node.Run(t, "ip", "route", "add", "198.18.0.0/16", "dev", "n-client")
	return l
}

// proxier returns a Proxier on the node's real iptables and conntrack.
func (l *lab) proxier(t *testing.T) *Proxier {
	t.Helper()
	ipt, err := kiptables.New(kiptables.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxier(ProxierConfig{Rules: l.cfg, IPTables: ipt, Conntrack: conntrack.Netlink{}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sync applies snap with p inside the node namespace.
func (l *lab) sync(t *testing.T, p *Proxier, snap *service.Snapshot) {
	t.Helper()
	p.Update(snap)
	if err := l.node.Do(func() error { return p.Sync(context.Background()) }); err != nil {
		t.Fatal(err)
	}
}

// endpoints returns the three backends at port.
func (l *lab) endpoints(port uint16) []service.Endpoint {
	var eps []service.Endpoint
	for i := range l.backends {
		eps = append(eps, service.Endpoint{Addr: netip.AddrPortFrom(backendAddr(i), port), Ready: true, Serving: true, NodeName: thisNode})
	}
	return eps
}

// serveTCP runs, in each backend, a server that answers every connection with
// "b<i> <client address>" and closes it.
func (l *lab) serveTCP(t *testing.T, port uint16) {
	t.Helper()
	for i, b := range l.backends {
		var ln net.Listener
		if err := b.Do(func() (err error) {
			ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() }) // stops tcpIdentServer
		go tcpIdentServer(ln, fmt.Sprintf("b%d", i))
	}
}

// tcpIdentServer is a backend: it tells each client who answered and whom it saw.
func tcpIdentServer(ln net.Listener, name string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr().(*net.TCPAddr).IP)
		c.Close()
	}
}

// serveUDP runs, in each backend, a server that answers every datagram with "b<i>".
func (l *lab) serveUDP(t *testing.T, port uint16) {
	t.Helper()
	for i, b := range l.backends {
		var pc net.PacketConn
		if err := b.Do(func() (err error) {
			pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() }) // stops udpIdentServer
		go udpIdentServer(pc, fmt.Sprintf("b%d", i))
	}
}

func udpIdentServer(pc net.PacketConn, name string) {
	buf := make([]byte, 512)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo([]byte(name+" "+string(buf[:n])), from) // "b1 who-3": who answered which question
	}
}

// answer is what a backend said: its name and the client address it saw.
type answer struct{ backend, client string }

// dial makes n TCP connections from ns to dst and returns the answers.
func dial(ns *netnstest.NS, dst string, n int) ([]answer, error) {
	var out []answer
	err := ns.Do(func() error {
		for range n {
			c, err := net.DialTimeout("tcp", dst, 3*time.Second)
			if err != nil {
				return err
			}
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil {
				return fmt.Errorf("read from %s: %w", dst, err)
			}
			f := strings.Fields(line)
			if len(f) != 2 {
				return fmt.Errorf("answer %q", line)
			}
			out = append(out, answer{f[0], f[1]})
		}
		return nil
	})
	return out, err
}

// udpClient is a UDP socket in the client namespace with a fixed source port, so
// that all its datagrams are one conntrack flow.
type udpClient struct {
	c   net.Conn
	seq int
}

func newUDPClient(t *testing.T, ns *netnstest.NS, dst string) *udpClient {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.Dial("udp", dst)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &udpClient{c: c}
}

// ask sends a numbered question and returns the backend that answered it. An
// answer to an earlier question (one that was asked again after a timeout,
// and answered twice) is skipped: it says where the flow went then, not now.
func (u *udpClient) ask() (string, error) {
	buf := make([]byte, 64)
	for range 5 { // UDP: a datagram may be lost; the flow is what matters
		u.seq++
		q := fmt.Sprintf("who-%d", u.seq)
		if _, err := u.c.Write([]byte(q)); err != nil {
			return "", err
		}
		_ = u.c.SetReadDeadline(time.Now().Add(time.Second))
		for {
			n, err := u.c.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				return "", err
			}
			if name, ans, ok := strings.Cut(string(buf[:n]), " "); ok && ans == q {
				return name, nil
			}
		}
	}
	return "", errors.New("no answer")
}

func netnstestRequireConntrack(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
}

// serveEcho runs, in each backend, a server that greets each connection with
// "b<i>" on a line, then echoes it until the client closes.
func (l *lab) serveEcho(t *testing.T, port uint16) {
	t.Helper()
	for i, b := range l.backends {
		var ln net.Listener
		if err := b.Do(func() (err error) {
			ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var conns sync.WaitGroup
		t.Cleanup(func() { ln.Close(); conns.Wait() })
		go echoServer(ln, fmt.Sprintf("b%d", i), &conns)
	}
}

func echoServer(ln net.Listener, name string, conns *sync.WaitGroup) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		conns.Go(func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute)) // a forgotten connection does not hang cleanup
			fmt.Fprintf(c, "%s\n", name)
			_, _ = io.Copy(c, c)
		})
	}
}

// dialEcho connects from the client to dst and returns the connection and the
// backend that answered.
func dialEcho(t *testing.T, l *lab, dst string) (net.Conn, string) {
	t.Helper()
	var c net.Conn
	if err := l.client.Do(func() (err error) { c, err = net.DialTimeout("tcp", dst, 3*time.Second); return err }); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		t.Fatalf("greeting from %s: %v", dst, err)
	}
	return c, strings.TrimSpace(line)
}

// echoLine writes msg on c and expects it back.
func echoLine(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(got) != msg {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}
