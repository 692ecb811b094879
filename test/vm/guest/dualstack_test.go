package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/kernel/link"
	"github.com/svcproxy/svcproxy/offload/ipvs"
)

// The lab's IPv6 addresses, next to its IPv4 ones (documentation prefix):
//
//	client 2001:db8:19::2-4 eth0 ── c0 2001:db8:19::1/112  director  b0 2001:db8:19::1:1/112 ── eth0 2001:db8:19::1:2-4 backend
var (
	nodeIP6     = netip.MustParseAddr("2001:db8:19::1")
	clientIPs6  = addrs("2001:db8:19::2", "2001:db8:19::3", "2001:db8:19::4")
	backendIPs6 = addrs("2001:db8:19::1:2", "2001:db8:19::1:3", "2001:db8:19::1:4")
)

// addIPv6 gives the lab's links their IPv6 addresses (without duplicate address
// detection: a tentative address cannot be used for a second or two), routes,
// forwarding, and the backends' IPv6 listeners.
func (l *lab) addIPv6(t *testing.T) {
	t.Helper()
	add := func(ns *netNS, dev string, gw netip.Addr, p ...netip.Prefix) {
		ns.do(t, func() error {
			lk, err := netlink.LinkByName(dev)
			if err != nil {
				return err
			}
			for _, a := range p {
				nl := nlAddr(a)
				nl.Flags = unix.IFA_F_NODAD
				if err := netlink.AddrAdd(lk, nl); err != nil {
					return fmt.Errorf("%s %s: %w", dev, a, err)
				}
			}
			if gw.IsValid() {
				return netlink.RouteAdd(&netlink.Route{LinkIndex: lk.Attrs().Index, Gw: net.IP(gw.AsSlice()),
					Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}})
			}
			return nil
		})
	}
	add(l.director, "c0", netip.Addr{}, pfx(nodeIP6, 112))
	add(l.director, "b0", netip.Addr{}, netip.MustParsePrefix("2001:db8:19::1:1/112"))
	var cs, bs []netip.Prefix
	for i := range clientIPs6 {
		cs, bs = append(cs, pfx(clientIPs6[i], 112)), append(bs, pfx(backendIPs6[i], 112))
	}
	add(l.client, "eth0", nodeIP6, cs...)
	add(l.backend, "eth0", netip.MustParseAddr("2001:db8:19::1:1"), bs...)
	l.director.sysctl(t, "net/ipv6/conf/all/forwarding", "1")
	// IPVS answers a connection to a virtual server without real servers with an
	// ICMPv6 port unreachable, rate-limited per destination after a burst.
	l.director.sysctl(t, "net/ipv6/icmp/ratelimit", "0")
	for _, ip := range backendIPs6 {
		serve(t, l.backend, netip.AddrPortFrom(ip, backendPort))
	}
}

// dualManifests: web (NodePort 30080) and sticky (ClientIP affinity) with a
// ClusterIP of each family over the three backends' addresses of that family,
// and empty (NodePort 30081) without endpoints.
func dualManifests() string {
	var b strings.Builder
	svc := func(name, last, extra string) {
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: default}\nspec:\n"+
			"  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv4, IPv6]\n  clusterIP: 198.18.0.%s\n"+
			"  clusterIPs: [198.18.0.%s, \"2001:db8:18::%s\"]\n%s---\n", name, last, last, last, extra)
	}
	svc("web", "40", "  type: NodePort\n  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]\n")
	svc("sticky", "41", "  sessionAffinity: ClientIP\n  ports: [{name: http, port: 80, targetPort: 8080}]\n")
	svc("empty", "42", "  type: NodePort\n  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081}]\n")
	for _, name := range []string{"web", "sticky"} {
		for _, f := range []struct {
			typ string
			ips []netip.Addr
		}{{"IPv4", backendIPs}, {"IPv6", backendIPs6}} {
			fmt.Fprintf(&b, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"+
				"metadata: {name: %s-%s, namespace: default, labels: {kubernetes.io/service-name: %s}}\n"+
				"addressType: %s\nports: [{name: http, port: 8080, protocol: TCP}]\nendpoints:\n",
				name, strings.ToLower(f.typ), name, f.typ)
			for _, ip := range f.ips {
				fmt.Fprintf(&b, "- {addresses: [\"%s\"], conditions: {ready: true}}\n", ip)
			}
			b.WriteString("---\n")
		}
	}
	return b.String()
}

// TestSvcproxyDualStack runs svcproxy --mode ipvs on a dual-stack node: a
// virtual server per family and ClusterIP, round-robin over the family's
// endpoints, masqueraded from outside --cluster-cidr (ip6tables over inet6 ip
// sets for IPv6), persistence for ClientIP affinity, NodePorts on the node's
// address of each family, a port without endpoints refused in both; then
// --cleanup leaves nothing in either family.
func TestSvcproxyDualStack(t *testing.T) {
	if _, err := os.Stat(svcproxyBin); err != nil {
		t.Skipf("needs %s (test/vm puts it in the guest): %v", svcproxyBin, err)
	}
	l := newLab(t)
	l.addIPv6(t)
	signal, _ := l.serve(t, dualManifests(), "--mode", "ipvs", "--node-ip", nodeIP.String()+","+nodeIP6.String(),
		"--hostname-override", "node-a", "--cluster-cidr", "198.19.1.0/24,2001:db8:19::1:0/112")
	var st struct{ IPFamilies []string }
	if err := json.Unmarshal([]byte(l.get(t, "127.0.0.1:10249", "/status")), &st); err != nil || !slices.Equal(st.IPFamilies, []string{"IPv4", "IPv6"}) {
		t.Fatalf("/status ipFamilies %v (%v), want both", st.IPFamilies, err)
	}

	for _, f := range []struct {
		name                 string
		client, node, onLink netip.Addr
		backends             []netip.Addr
		web, sticky, empty   netip.Addr
	}{
		{"IPv4", clientIPs[0], nodeIP, netip.MustParseAddr("198.19.1.1"), backendIPs,
			netip.MustParseAddr("198.18.0.40"), netip.MustParseAddr("198.18.0.41"), netip.MustParseAddr("198.18.0.42")},
		{"IPv6", clientIPs6[0], nodeIP6, netip.MustParseAddr("2001:db8:19::1:1"), backendIPs6,
			netip.MustParseAddr("2001:db8:18::40"), netip.MustParseAddr("2001:db8:18::41"), netip.MustParseAddr("2001:db8:18::42")},
	} {
		t.Run(f.name, func(t *testing.T) {
			got, peers := map[string]int{}, map[string]int{}
			for range 9 {
				c := l.dial(t, f.client, netip.AddrPortFrom(f.web, 80))
				got[c.backend]++
				peers[c.peer]++
				c.Close()
			}
			logSpread(t, f.name+" rr", got)
			for _, b := range f.backends {
				if got[b.String()] != 3 {
					t.Errorf("ClusterIP %s: spread %s, want 3 each over %v", f.web, formatSpread(got), f.backends)
				}
			}
			if peers[f.onLink.String()] != 9 {
				t.Errorf("sources the backends saw: %v, want the node's %s (masqueraded) for all 9", peers, f.onLink)
			}
			first := l.dial(t, f.client, netip.AddrPortFrom(f.sticky, 80))
			first.Close()
			for range 4 {
				if c := l.dial(t, f.client, netip.AddrPortFrom(f.sticky, 80)); c.backend != first.backend {
					t.Errorf("affinity on %s: first %s, then %s", f.sticky, first.backend, c.backend)
				}
			}
			c := l.dial(t, f.client, netip.AddrPortFrom(f.node, 30080))
			c.echo(t)
			c.Close()
			for _, dst := range []netip.AddrPort{netip.AddrPortFrom(f.empty, 80), netip.AddrPortFrom(f.node, 30081)} {
				if err := tryDial(t, l.client, f.client, dst); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("%s without endpoints: %v, want connection refused", dst, err)
				}
			}
		})
	}
	sets := l.director.output(t, "ipset", "save")
	if !strings.Contains(sets, "add "+ipvs.SetName("IPv6", ipvs.SetClusterIPs)+" 2001:db8:18::40,tcp:80") {
		t.Errorf("while running: want the IPv6 masquerade set's member:\n%s", sets)
	}
	signal(syscall.SIGTERM)

	out := l.director.output(t, svcproxyBin, "--cleanup")
	t.Logf("svcproxy --cleanup: %s", strings.TrimSpace(out))
	l.wantCleanedUp(t)
}

// wantCleanedUp checks, after svcproxy --cleanup, that nothing of svcproxy's
// is left in the director in either family: no virtual server, no dummy
// interface, no SVCP- rule in iptables or ip6tables, no ip set.
func (l *lab) wantCleanedUp(t *testing.T) {
	t.Helper()
	vss, err := l.ipvs.VirtualServers(context.Background())
	must(t, err)
	if len(vss) != 0 {
		t.Errorf("after --cleanup: virtual servers %v, want none", vss)
	}
	if _, err := l.links.Addresses(context.Background(), ipvs.DefaultInterface); !errors.Is(err, link.ErrNotExist) {
		t.Errorf("after --cleanup: %s: %v, want it gone", ipvs.DefaultInterface, err)
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if nat := l.director.output(t, save, "-t", "nat"); strings.Contains(nat, "SVCP-") {
			t.Errorf("after --cleanup, %s: rules left:\n%s", save, nat)
		}
	}
	if sets := l.director.output(t, "ipset", "list", "-n"); strings.TrimSpace(sets) != "" {
		t.Errorf("after --cleanup, ip sets left: %s", sets)
	}
}

// tryDial connects from ns, from src, to dst and returns the error, if any.
func tryDial(t *testing.T, ns *netNS, src netip.Addr, dst netip.AddrPort) error {
	t.Helper()
	var err error
	ns.do(t, func() error {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
		var c net.Conn
		if c, err = d.DialContext(context.Background(), "tcp", dst.String()); err == nil {
			c.Close()
		}
		return nil
	})
	return err
}
