// Package offloadtest is the real-kernel lab of the kernel modes' tests
// (offload/iptables, offload/nftables): a node namespace routing between a
// client namespace and three backend namespaces over veth pairs (no bridge, so
// no br_netfilter trap), backends that say who answered and whom they saw, and
// the clients that ask them. Each mode's tests put their own Dataplane on Node.
//
//	client 198.19.10.2 --- 198.19.10.1 [node] 198.19.1x.1 --- 198.19.1x.2 backend x (x = 1..3)
//
// The pod network (ClusterCIDR) is 198.19.8.0/21, so the client is a "pod" and
// its ClusterIP traffic keeps its address. The node's address is 198.19.10.1.
// With AddIPv6 each link also has an address of 2001:db8:19::/64 (services:
// 2001:db8:18::/112).
package offloadtest

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/service"
)

// The lab's addresses.
var (
	ClientAddr   = netip.MustParseAddr("198.19.10.2")
	ClientAddr6  = netip.MustParseAddr("2001:db8:19::10:2")
	ClusterCIDR  = netip.MustParsePrefix("198.19.8.0/21")
	ClusterCIDR6 = netip.MustParsePrefix("2001:db8:19::/64")
)

// BackendAddr is backend i's IPv4 address.
func BackendAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, byte(11 + i), 2}) }

// BackendAddr6 is backend i's IPv6 address (AddIPv6).
func BackendAddr6(i int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:19::%x:2", 0x11+i))
}

// Lab is the topology; everything goes when the test ends.
type Lab struct {
	Node, Client *netnstest.NS
	Backends     []*netnstest.NS
	// NodeName is the node the backends run on (their endpoints' NodeName).
	NodeName string
}

// New builds the lab for a node named nodeName. The caller checks first that
// it may (netnstest.RequireRoot with the tools its mode needs).
func New(t *testing.T, nodeName string) *Lab {
	t.Helper()
	l := &Lab{Node: netnstest.New(t), Client: netnstest.New(t), NodeName: nodeName}
	l.Node.Sysctl(t, "net.ipv4.ip_forward", "1")
	// The node sends VIP traffic back out the interface it came in on when the
	// endpoint is the client's neighbour; redirects would eat REJECT's ICMP budget.
	// (The interface's value counts too: "all" OR "<if>", so set "default"
	// before the veths exist.)
	l.Node.Sysctl(t, "net.ipv4.conf.all.send_redirects", "0")
	l.Node.Sysctl(t, "net.ipv4.conf.default.send_redirects", "0")
	netnstest.Veth(t, l.Node, "n-client", netip.MustParsePrefix("198.19.10.1/24"), l.Client, "eth0", netip.MustParsePrefix("198.19.10.2/24"))
	l.Client.Run(t, "ip", "route", "add", "default", "via", "198.19.10.1")
	for i := range 3 {
		b := netnstest.New(t)
		node := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(11 + i), 1}), 24)
		netnstest.Veth(t, l.Node, fmt.Sprintf("n-b%d", i), node, b, "eth0", netip.PrefixFrom(BackendAddr(i), 24))
		b.Run(t, "ip", "route", "add", "default", "via", node.Addr().String())
		l.Backends = append(l.Backends, b)
	}
	// A locally generated packet needs a route before netfilter sees it.
	l.Node.Run(t, "ip", "route", "add", "198.18.0.0/16", "dev", "n-client")
	return l
}

// AddIPv6 gives every link an IPv6 address too:
//
//	client 2001:db8:19::10:2 --- 2001:db8:19::10:1 [node] 2001:db8:19::1x:1 --- 2001:db8:19::1x:2 backend x
func (l *Lab) AddIPv6(t *testing.T) {
	t.Helper()
	l.Node.Sysctl(t, "net.ipv6.conf.all.forwarding", "1")
	// REJECT's ICMPv6 errors are rate-limited per destination (1/s after a
	// burst); a test that is refused many times must not lose one to that.
	l.Node.Sysctl(t, "net.ipv6.icmp.ratelimit", "0")
	l.Node.AddAddr(t, "n-client", netip.MustParsePrefix("2001:db8:19::10:1/112"))
	l.Client.AddAddr(t, "eth0", netip.MustParsePrefix("2001:db8:19::10:2/112"))
	l.Client.Run(t, "ip", "-6", "route", "add", "default", "via", "2001:db8:19::10:1")
	for i, b := range l.Backends {
		node := netip.MustParsePrefix(fmt.Sprintf("2001:db8:19::%x:1/112", 0x11+i))
		l.Node.AddAddr(t, fmt.Sprintf("n-b%d", i), node)
		b.AddAddr(t, "eth0", netip.PrefixFrom(BackendAddr6(i), 112))
		b.Run(t, "ip", "-6", "route", "add", "default", "via", node.Addr().String())
	}
	l.Node.Run(t, "ip", "-6", "route", "add", "2001:db8:18::/112", "dev", "n-client")
}

// Endpoints returns the three backends at port, as endpoints of NodeName.
func (l *Lab) Endpoints(port uint16) []service.Endpoint { return l.endpoints(BackendAddr, port) }

// Endpoints6 returns the three backends' IPv6 addresses at port (AddIPv6).
func (l *Lab) Endpoints6(port uint16) []service.Endpoint { return l.endpoints(BackendAddr6, port) }

func (l *Lab) endpoints(addr func(int) netip.Addr, port uint16) []service.Endpoint {
	var eps []service.Endpoint
	for i := range l.Backends {
		eps = append(eps, service.Endpoint{Addr: netip.AddrPortFrom(addr(i), port), Ready: true, Serving: true, NodeName: l.NodeName})
	}
	return eps
}

// HostPort joins an address and a port as a dial string: [v6]:port or v4:port.
func HostPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// Dataplane is what RunOnNode drives: a kernel mode's Dataplane.
type Dataplane interface {
	Sync(ctx context.Context, snap *service.Snapshot) error
	Run(ctx context.Context) error
}

// RunOnNode makes dp's first sync of snap on Node, then runs it there (its
// periodic resyncs too) until the test ends; an error of either fails the
// test then.
func (l *Lab) RunOnNode(t *testing.T, dp Dataplane, snap *service.Snapshot) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// Run resyncs from this goroutine, so its syncs run in the node.
		done <- l.Node.Do(func() error {
			if err := dp.Sync(ctx, snap); err != nil {
				return err
			}
			return dp.Run(ctx)
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}
