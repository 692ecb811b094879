package userspace

import (
	"context"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func portName(svc, port string, proto service.Protocol) service.PortName {
	ns, name, _ := strings.Cut(svc, "/")
	return service.PortName{NamespacedName: service.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// testPortals covers every kind of rule: a TCP port with an external IP and a
// node port, a UDP port, a port without endpoints (with a node port), a port
// whose listener could not be bound, an IPv6 ClusterIP that is left out, a port
// hybrid mode promoted (no portal, a guarded listener), and a LoadBalancer IP
// with source ranges (a portal per allowed source, a DROP for the rest).
var testPortals = []Portal{
	{Name: portName("default/web", "http", service.TCP), Protocol: service.TCP,
		IPs: addrs("198.18.0.10", "198.19.100.1"), Port: 80, NodePort: 30080, Listener: 40001, HasEndpoints: true},
	{Name: portName("kube-system/dns", "dns", service.UDP), Protocol: service.UDP,
		IPs: addrs("198.18.0.53", "fd00::53"), Port: 53, Listener: 40002, HasEndpoints: true},
	{Name: portName("default/empty", "", service.TCP), Protocol: service.TCP,
		IPs: addrs("198.18.0.11"), Port: 8080, NodePort: 30081, Listener: 40003},
	{Name: portName("default/unbound", "", service.UDP), Protocol: service.UDP,
		IPs: addrs("198.18.0.12"), Port: 9000, HasEndpoints: true},
	{Name: portName("default/promoted", "http", service.TCP), Protocol: service.TCP,
		IPs: addrs("198.18.0.13"), Port: 80, Listener: 40004, HasEndpoints: true, Excluded: true},
	{Name: portName("default/lb", "http", service.TCP), Protocol: service.TCP,
		IPs: addrs("198.18.0.14", "198.18.200.1"), Port: 80, Listener: 40005, HasEndpoints: true,
		External: addrs("198.18.200.1"), Firewalled: addrs("198.18.200.1"), Sources: []string{"203.0.113.0/25", "198.19.0.0/24", "198.18.200.1"}},
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name, golden string
		got          []byte
	}{
		{"portals", "portals.golden", Render(service.IPv4, testPortals)},
		{"no portals", "portals-empty.golden", Render(service.IPv4, nil)},
		{"cleanup", "cleanup.golden", renderCleanup()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGolden(t, tt.golden, tt.got)
		})
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	t.Logf("%s, as iptables-restore reads it:\n%s", path, got)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

// loadPortals applies testPortals to a Fake the way the Proxier does.
func loadPortals(t *testing.T) *iptables.Fake {
	t.Helper()
	ipt := iptables.NewFake()
	ipt.SetLocalAddrs(addrs("198.19.0.1", "127.0.0.1")...)
	if err := apply(context.Background(), ipt, Render(service.IPv4, testPortals), true); err != nil {
		t.Fatalf("apply: %v", err)
	}
	// A second apply changes nothing: hooks are not duplicated.
	if err := apply(context.Background(), ipt, Render(service.IPv4, testPortals), true); err != nil {
		t.Fatalf("apply again: %v", err)
	}
	return ipt
}

func TestPortalTraces(t *testing.T) {
	ipt := loadPortals(t)
	client := netip.MustParseAddr("198.19.2.2")
	node := netip.MustParseAddr("198.19.0.1")
	tests := []struct {
		name     string
		pkt      iptables.Packet
		verdict  string
		redirect uint16
	}{
		{"ClusterIP from a pod", iptables.Packet{Src: client, Dst: ap("198.18.0.10:80"), InIface: "eth0"}, "ACCEPT", 40001},
		{"ClusterIP from the node", iptables.Packet{Src: node, Dst: ap("198.18.0.10:80"), Local: true}, "ACCEPT", 40001},
		{"external IP from outside", iptables.Packet{Src: client, Dst: ap("198.19.100.1:80"), InIface: "eth0"}, "ACCEPT", 40001},
		{"UDP ClusterIP", iptables.Packet{Proto: "udp", Src: client, Dst: ap("198.18.0.53:53"), InIface: "eth0"}, "ACCEPT", 40002},
		{"UDP ClusterIP from the node", iptables.Packet{Proto: "udp", Src: node, Dst: ap("198.18.0.53:53"), Local: true}, "ACCEPT", 40002},
		{"wrong protocol is not redirected", iptables.Packet{Proto: "udp", Src: client, Dst: ap("198.18.0.10:80"), InIface: "eth0"}, "ACCEPT", 0},
		{"no endpoints from a pod", iptables.Packet{Src: client, Dst: ap("198.18.0.11:8080"), InIface: "eth0"}, "REJECT", 0},
		{"no endpoints from the node", iptables.Packet{Src: node, Dst: ap("198.18.0.11:8080"), Local: true}, "REJECT", 0},
		{"no endpoints on the node port", iptables.Packet{Src: client, Dst: ap("198.19.0.1:30081"), InIface: "eth0"}, "REJECT", 0},
		{"node port with endpoints: the listener takes it", iptables.Packet{Src: client, Dst: ap("198.19.0.1:30080"), InIface: "eth0"}, "ACCEPT", 0},
		{"no listener", iptables.Packet{Proto: "udp", Src: client, Dst: ap("198.18.0.12:9000"), InIface: "eth0"}, "REJECT", 0},
		{"straight to a listener from a pod", iptables.Packet{Src: client, Dst: ap("198.19.0.1:40001"), InIface: "eth0"}, "REJECT", 0},
		{"straight to a listener from the node", iptables.Packet{Src: node, Dst: ap("127.0.0.1:40001"), Local: true}, "REJECT", 0},
		{"straight to a UDP listener", iptables.Packet{Proto: "udp", Src: client, Dst: ap("198.19.0.1:40002"), InIface: "eth0"}, "REJECT", 0},
		{"a promoted port's listener is guarded too", iptables.Packet{Src: client, Dst: ap("198.19.0.1:40004"), InIface: "eth0"}, "REJECT", 0},
		{"a promoted port has no portal", iptables.Packet{Src: client, Dst: ap("198.18.0.13:80"), InIface: "eth0"}, "ACCEPT", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := ipt.Trace(tt.pkt)
			if err != nil {
				t.Fatalf("trace: %v", err)
			}
			t.Logf("\n%s", tr)
			if tr.Verdict != tt.verdict || tr.Redirect != tt.redirect {
				t.Errorf("got %s redirect :%d, want %s redirect :%d\n%s", tr.Verdict, tr.Redirect, tt.verdict, tt.redirect, tr)
			}
		})
	}
}

func TestCleanupRemovesEverything(t *testing.T) {
	ipt := loadPortals(t)
	for range 2 { // twice: cleanup of a clean node is not an error
		if err := Cleanup(context.Background(), ipt); err != nil {
			t.Fatalf("Cleanup: %v", err)
		}
	}
	if after := ipt.Dump(); strings.Contains(after, "SVCP") {
		t.Errorf("after Cleanup, rules of ours are left:\n%s", after)
	}
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// testPortals6 are the IPv6 side of a dual-stack node's services: the same
// kinds of port, with the IPv6 addresses of IPv6 Services (the IPv4 ones of
// a dual-stack Service are left out of ip6tables' text).
var testPortals6 = []Portal{
	{Name: portName("default/web", "http", service.TCP), Protocol: service.TCP,
		IPs: addrs("2001:db8:18::10", "198.18.0.10"), Port: 80, NodePort: 30080, Listener: 40001, HasEndpoints: true},
	{Name: portName("kube-system/dns", "dns", service.UDP), Protocol: service.UDP,
		IPs: addrs("2001:db8:18::53"), Port: 53, Listener: 40002, HasEndpoints: true},
	{Name: portName("default/empty", "", service.TCP), Protocol: service.TCP,
		IPs: addrs("2001:db8:18::11"), Port: 8080, NodePort: 30081, Listener: 40003},
}

// TestPortalsIPv6 renders the portals for ip6tables and traces packets
// through them in the Fake of ip6tables, which refuses IPv4 addresses and
// ICMP types: REDIRECT is the same in both families, only the masks and the
// REJECT's ICMPv6 message differ.
func TestPortalsIPv6(t *testing.T) {
	text := Render(service.IPv6, testPortals6)
	checkGolden(t, "portals-ipv6.golden", text)
	ipt := iptables.NewFakeFamily(iptables.IPv6)
	ipt.SetLocalAddrs(addrs("2001:db8:19::1", "::1")...)
	if err := apply(context.Background(), ipt, text, true); err != nil {
		t.Fatalf("apply: %v", err)
	}
	client, node := netip.MustParseAddr("2001:db8:19::2:2"), netip.MustParseAddr("2001:db8:19::1")
	tests := []struct {
		name     string
		pkt      iptables.Packet
		verdict  string
		redirect uint16
	}{
		{"ClusterIP from a pod", iptables.Packet{Src: client, Dst: ap("[2001:db8:18::10]:80"), InIface: "eth0"}, "ACCEPT", 40001},
		{"ClusterIP from the node", iptables.Packet{Src: node, Dst: ap("[2001:db8:18::10]:80"), Local: true}, "ACCEPT", 40001},
		{"UDP ClusterIP", iptables.Packet{Proto: "udp", Src: client, Dst: ap("[2001:db8:18::53]:53"), InIface: "eth0"}, "ACCEPT", 40002},
		{"no endpoints", iptables.Packet{Src: client, Dst: ap("[2001:db8:18::11]:8080"), InIface: "eth0"}, "REJECT", 0},
		{"no endpoints on the node port", iptables.Packet{Src: client, Dst: ap("[2001:db8:19::1]:30081"), InIface: "eth0"}, "REJECT", 0},
		{"node port with endpoints: the listener takes it", iptables.Packet{Src: client, Dst: ap("[2001:db8:19::1]:30080"), InIface: "eth0"}, "ACCEPT", 0},
		{"straight to a listener", iptables.Packet{Src: client, Dst: ap("[2001:db8:19::1]:40001"), InIface: "eth0"}, "REJECT", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := ipt.Trace(tt.pkt)
			if err != nil {
				t.Fatalf("trace: %v", err)
			}
			if tr.Verdict != tt.verdict || tr.Redirect != tt.redirect {
				t.Errorf("got %s redirect :%d, want %s redirect :%d\n%s", tr.Verdict, tr.Redirect, tt.verdict, tt.redirect, tr)
			}
		})
	}
}
