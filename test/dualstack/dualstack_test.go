package dualstack

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/proxytest"
	"github.com/svcproxy/svcproxy/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// The Services, each with a ClusterIP of each family:
//
//	web     198.18.0.10  2001:db8:18::10  NodePort 30080, three endpoints per family
//	sticky  198.18.0.11  2001:db8:18::11  ClientIP affinity, the same endpoints
//	empty   198.18.0.12  2001:db8:18::12  NodePort 30081, no endpoints
//	dns     198.18.0.13  2001:db8:18::13  UDP port 53, the same endpoints
//
// The endpoints are three servers in the backend namespace (TCP and UDP ports
// 8081-8083, on its IPv4 and its IPv6 address), one EndpointSlice each per
// addressType.
func manifests() string {
	var b strings.Builder
	svc := func(name, v4, v6, extra string) {
		fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata: {name: %s, namespace: default}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: %s
  clusterIPs: [%s, "%s"]
%s---
`, name, v4, v4, v6, extra)
	}
	svc("web", "198.18.0.10", "2001:db8:18::10", "  type: NodePort\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n")
	svc("sticky", "198.18.0.11", "2001:db8:18::11", "  sessionAffinity: ClientIP\n  ports: [{name: http, port: 80, targetPort: http}]\n")
	svc("empty", "198.18.0.12", "2001:db8:18::12", "  type: NodePort\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30081}]\n")
	svc("dns", "198.18.0.13", "2001:db8:18::13", "  ports: [{name: dns, port: 53, protocol: UDP, targetPort: dns}]\n")
	for _, name := range []string{"web", "sticky", "dns"} {
		port, proto := "http", "TCP"
		if name == "dns" {
			port, proto = "dns", "UDP"
		}
		for i := range 3 {
			for _, f := range []struct{ typ, addr string }{
				{"IPv4", proxytest.BackendAddr.Addr().String()}, {"IPv6", proxytest.BackendAddr6.Addr().String()},
			} {
				fmt.Fprintf(&b, `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %s-%s-%d, namespace: default, labels: {kubernetes.io/service-name: %s}}
addressType: %s
ports: [{name: %s, port: %d, protocol: %s}]
endpoints: [{addresses: ["%s"], conditions: {ready: true}}]
---
`, name, strings.ToLower(f.typ), i, name, f.typ, port, 8081+i, proto, f.addr)
			}
		}
	}
	return b.String()
}

// family is what the checks need of one IP family.
type family struct {
	name                    string
	client, node            netip.Addr
	web, sticky, empty, dns netip.Addr
	nodeOnBackend           string // the node's address on the backend's link: what masquerade shows
}

var families = []family{
	{"IPv4", proxytest.ClientAddr.Addr(), proxytest.NodeAddrC.Addr(),
		netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.11"), netip.MustParseAddr("198.18.0.12"),
		netip.MustParseAddr("198.18.0.13"), proxytest.NodeAddrB.Addr().String()},
	{"IPv6", proxytest.ClientAddr6.Addr(), proxytest.NodeAddrC6.Addr(),
		netip.MustParseAddr("2001:db8:18::10"), netip.MustParseAddr("2001:db8:18::11"), netip.MustParseAddr("2001:db8:18::12"),
		netip.MustParseAddr("2001:db8:18::13"), proxytest.NodeAddrB6.Addr().String()},
}

// The modes that serve IPv6, with the flags each needs here.
var modes = []struct {
	name  string
	mode  string
	flags []string
	// viaNode: the backend sees the node, not the client (a userspace hop)
	viaNode bool
	// promote: hybrid's kernel path; checkPromotion drives web's IPv6 port
	// hot and checks that it alone moves there
	promote string
}{
	{"iptables", "iptables", nil, false, ""},
	{"nftables", "nftables", nil, false, ""},
	{"userspace", "userspace", nil, true, ""},
	// Every port starts in userspace. The checks make at most 33 connections
	// to one port of a family (web: 30 + 3 to its NodePort), fewer than 20/s
	// held for 3s asks, so only checkPromotion's burst promotes.
	{"hybrid-iptables", "hybrid", []string{"--offload", "iptables", "--promote-conn-rate", "20", "--promote-after", "3s", "--demote-after", "0"}, true, "iptables"},
	{"hybrid-nftables", "hybrid", []string{"--offload", "nftables", "--promote-conn-rate", "20", "--promote-after", "3s", "--demote-after", "0"}, true, "nftables"},
}

func TestDualStack(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-save", "ip6tables-save")
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			if m.mode == "nftables" || m.promote == "nftables" {
				netnstest.RequireRoot(t, "nft")
			}
			e := proxytest.New(t)
			// A packet for a ClusterIP without endpoints is routed before the
			// filter table REJECTs it: without a route the node answers
			// "network unreachable" instead (a real node has a default route).
			e.Node.Run(t, "ip", "route", "add", "198.18.0.0/16", "dev", "c0")
			e.Node.Run(t, "ip", "-6", "route", "add", "2001:db8:18::/112", "dev", "c0")
			// That route sends the packet back out the link it came in on: the
			// node's ICMP redirect would use up the rate limit REJECT's port
			// unreachable shares ("all" OR the interface's value counts).
			e.Node.Sysctl(t, "net.ipv4.conf.all.send_redirects", "0")
			e.Node.Sysctl(t, "net.ipv4.conf.c0.send_redirects", "0")
			e.Node.Sysctl(t, "net.ipv6.icmp.ratelimit", "0")
			serveIdents(t, e.Backend)
			e.Serve(t, manifests(), append([]string{"--mode", m.mode}, m.flags...)...)
			proxy := e.Proxy
			checkStatusFamilies(t, e)
			for _, f := range families {
				t.Run(f.name, func(t *testing.T) { checkFamily(t, e, f, m.viaNode) })
			}
			if m.promote != "" {
				t.Run("promote IPv6", func(t *testing.T) { checkPromotion(t, e, m.promote, families[1], families[0]) })
			}
			// SIGKILL leaves every rule in place; --cleanup must remove them all.
			_ = proxy.Process.Kill()
			_ = proxy.Wait()
			cleanup := e.Start(t, "--cleanup")
			if err := cleanup.Wait(); err != nil {
				t.Fatalf("svcproxy --cleanup: %v", err)
			}
			checkNothingLeft(t, e)
		})
	}
}

// checkStatusFamilies: /status has a document per family.
func checkStatusFamilies(t *testing.T, e *proxytest.Env) {
	t.Helper()
	var st struct {
		IPFamilies []string `json:"ipFamilies"`
	}
	if err := json.Unmarshal([]byte(e.Get(t, "/status")), &st); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.IPFamilies, []string{"IPv4", "IPv6"}) {
		t.Fatalf("/status ipFamilies %v, want both", st.IPFamilies)
	}
}

func checkFamily(t *testing.T, e *proxytest.Env, f family, viaNode bool) {
	// Round-robin or random: every endpoint of the family answers.
	seen := map[string]int{}
	for range 30 {
		name, peer, err := ask(e.Client, hostPort(f.web, 80))
		if err != nil {
			t.Fatalf("ClusterIP %s: %v", f.web, err)
		}
		seen[name]++
		want := f.client.String()
		if viaNode {
			want = f.nodeOnBackend
		}
		if peer != want {
			t.Errorf("ClusterIP %s: %s saw %s, want %s", f.web, name, peer, want)
		}
	}
	for _, n := range []string{"e8081", "e8082", "e8083"} {
		if seen[n] == 0 {
			t.Errorf("ClusterIP %s: endpoint %s never answered in 30 connections: %v", f.web, n, seen)
		}
	}
	first, _, err := ask(e.Client, hostPort(f.sticky, 80))
	if err != nil {
		t.Fatalf("ClusterIP %s: %v", f.sticky, err)
	}
	for range 9 {
		if name, _, err := ask(e.Client, hostPort(f.sticky, 80)); err != nil || name != first {
			t.Errorf("affinity on %s: first %s, then %s (%v)", f.sticky, first, name, err)
		}
	}
	for range 3 {
		if _, _, err := ask(e.Client, hostPort(f.node, 30080)); err != nil {
			t.Errorf("NodePort on %s: %v", f.node, err)
		}
	}
	for _, dst := range []string{hostPort(f.empty, 80), hostPort(f.node, 30081)} {
		if _, _, err := ask(e.Client, dst); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s without endpoints: %v, want connection refused (REJECT)", dst, err)
		}
	}
	// UDP: each client socket (a new source port) is a new flow, or a new
	// session in userspace mode; the replies come back from the ClusterIP
	// (the socket is connected to it and takes nothing else).
	seen = map[string]int{}
	for range 30 {
		name, _, err := askUDP(e.Client, hostPort(f.dns, 53))
		if err != nil {
			t.Fatalf("UDP ClusterIP %s: %v", f.dns, err)
		}
		seen[name]++
	}
	for _, n := range []string{"e8081", "e8082", "e8083"} {
		if seen[n] == 0 {
			t.Errorf("UDP ClusterIP %s: endpoint %s never answered in 30 flows: %v", f.dns, n, seen)
		}
	}
}

// checkPromotion drives web's port in family hot (about 100 connections a
// second) until hybrid promotes it to the iptables path of that family, and
// checks that the other family's side of the same port stays in userspace:
// each family has its own Promoter and counters. On the kernel path the
// backend sees the client, every endpoint still answers, and the promoted
// port's rules are in that family's iptables only.
func checkPromotion(t *testing.T, e *proxytest.Env, path string, hot, other family) {
	const port = "default/web:http"
	vip := hostPort(hot.web, 80)
	b := proxytest.StartBurst(t, e.Client, vip, 10*time.Millisecond)
	e.WaitFamilyPort(t, hot.name, port, "promoted to "+path, func(p proxytest.StatusPort) bool { return p.Path == path })
	b.Check(t, "burst on "+vip, "the promotion")
	if p, err := e.TryFamilyPort(other.name, port); err != nil || p.Path != "userspace" {
		t.Errorf("%s side of %s: %+v, %v; want it still in userspace", other.name, port, p, err)
	}
	seen := map[string]int{}
	for range 30 {
		name, peer, err := ask(e.Client, vip)
		if err != nil {
			t.Fatalf("promoted %s: %v", vip, err)
		}
		seen[name]++
		if peer != hot.client.String() {
			t.Errorf("promoted %s: %s saw %s, want the client's %s", vip, name, peer, hot.client)
		}
	}
	for _, n := range []string{"e8081", "e8082", "e8083"} {
		if seen[n] == 0 {
			t.Errorf("promoted %s: endpoint %s never answered in 30 connections: %v", vip, n, seen)
		}
	}
	if _, peer, err := ask(e.Client, hostPort(other.web, 80)); err != nil || peer != other.nodeOnBackend {
		t.Errorf("%s in userspace: backend saw %q (%v), want the node's %s", other.web, peer, err, other.nodeOnBackend)
	}
	saves := map[string]string{"IPv4": "iptables-save", "IPv6": "ip6tables-save"}
	portal := func(a netip.Addr) string {
		return "-A SVCP-PORTALS-CONTAINER -d " + netip.PrefixFrom(a, a.BitLen()).String()
	}
	// The kernel path's rules for the port, in one family: an SVCP-SVC- chain
	// in iptables mode, an element of service-ips in the family's nft table.
	inKernel := func(f family) bool {
		if path == "nftables" {
			tables := map[string]string{"IPv4": "ip", "IPv6": "ip6"}
			out, _ := e.Node.Command(t.Context(), "nft", "list", "map", tables[f.name], "svcproxy", "service-ips").CombinedOutput()
			return strings.Contains(string(out), f.web.String()+" . tcp . 80")
		}
		return strings.Contains(e.Node.Run(t, saves[f.name], "-t", "nat"), ":SVCP-SVC-")
	}
	if save := e.Node.Run(t, saves[hot.name], "-t", "nat"); !inKernel(hot) || strings.Contains(save, portal(hot.web)) {
		t.Errorf("promoted %s: want its %s rules and no portal in %s:\n%s", hot.web, path, saves[hot.name], save)
	}
	if save := e.Node.Run(t, saves[other.name], "-t", "nat"); inKernel(other) || !strings.Contains(save, portal(other.web)) {
		t.Errorf("%s in userspace: want its portal and no %s rules (%s):\n%s", other.web, path, saves[other.name], save)
	}
	e.LogMoves(t)
}

// checkNothingLeft: no chain, rule, table or address of svcproxy in either family.
func checkNothingLeft(t *testing.T, e *proxytest.Env) {
	t.Helper()
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if out := e.Node.Run(t, save); strings.Contains(out, "SVCP") {
			t.Errorf("after --cleanup, %s:\n%s", save, out)
		}
	}
	if _, err := os.Stat("/usr/sbin/nft"); err == nil {
		if out := e.Node.Run(t, "nft", "list", "tables"); strings.Contains(out, "svcproxy") {
			t.Errorf("after --cleanup, nft list tables:\n%s", out)
		}
	}
	for _, dst := range []string{"198.18.0.10:80", "[2001:db8:18::10]:80"} {
		if _, _, err := ask(e.Client, dst); err == nil {
			t.Errorf("%s still answers after --cleanup", dst)
		}
	}
}

func hostPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// ask connects from ns to dst and reads the endpoint's line: its name and the
// client address it saw.
func ask(ns *netnstest.NS, dst string) (name, peer string, err error) {
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", dst, 5*time.Second)
		return err
	}); err != nil {
		return "", "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", "", fmt.Errorf("%s: read: %w", dst, err)
	}
	name, peer, _ = strings.Cut(strings.TrimSpace(line), " ")
	return name, peer, nil
}

// askUDP sends a datagram from ns to dst and reads the endpoint's reply: its
// name and the client address it saw.
func askUDP(ns *netnstest.NS, dst string) (name, peer string, err error) {
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.Dial("udp", dst)
		return err
	}); err != nil {
		return "", "", err
	}
	defer c.Close()
	// A lost datagram is retried, as a DNS client would.
	buf := make([]byte, 512)
	for range 5 {
		if _, err := c.Write([]byte("who\n")); err != nil {
			return "", "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Read(buf)
		if err == nil {
			name, peer, _ = strings.Cut(strings.TrimSpace(string(buf[:n])), " ")
			return name, peer, nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return "", "", err
		}
	}
	return "", "", fmt.Errorf("%s: no reply to 5 datagrams", dst)
}

// serveIdents runs the three endpoints in the backend namespace: each
// answers a connection with "e<port> <client address>" and closes it, and
// each datagram with the same line, on both of the namespace's addresses.
func serveIdents(t *testing.T, ns *netnstest.NS) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // last: after the listeners below are closed
	for port := 8081; port <= 8083; port++ {
		var ln net.Listener
		var pc net.PacketConn
		if err := ns.Do(func() (err error) {
			if ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port)); err != nil {
				return err
			}
			pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("e%d", port)
		wg.Go(func() { identServer(ln, name) })
		wg.Go(func() { identUDPServer(pc, name) })
		t.Cleanup(func() { ln.Close(); pc.Close() })
	}
}

func identUDPServer(pc net.PacketConn, name string) {
	buf := make([]byte, 512)
	for {
		_, from, err := pc.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		ap, _ := netip.ParseAddrPort(from.String())
		_, _ = pc.WriteTo(fmt.Appendf(nil, "%s %s\n", name, ap.Addr().Unmap()), from)
	}
}

func identServer(ln net.Listener, name string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		fmt.Fprintf(c, "%s %s\n", name, ap.Addr().Unmap())
		c.Close()
	}
}
