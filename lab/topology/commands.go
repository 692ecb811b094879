package topology

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Commands renders the topology as the `ip` and `sysctl` command lines that
// build it, in order. Running them on a machine without the namespaces
// builds the lab; nothing here touches the machine's own namespace (every
// command names a namespace with -n or `ip netns exec`).
func (p *Plan) Commands() [][]string {
	cmds := p.NodeCommands()
	for _, h := range p.Hosts {
		cmds = append(cmds, p.HostCommands(h)...)
	}
	return append(cmds, p.ServiceRouteCommands()...)
}

// NodeCommands make the node's namespace.
func (p *Plan) NodeCommands() [][]string {
	node := p.Namespace(p.Node.Name)
	sysctl := []string{"ip", "netns", "exec", node, "sysctl", "-qw",
		// The node forwards between pods, and must not send ICMP redirects for
		// traffic that leaves the way it came: the redirects share the ICMP rate
		// limit with errors and can swallow a REJECT's port-unreachable.
		"net.ipv4.ip_forward=1",
		"net.ipv4.conf.all.send_redirects=0",
		"net.ipv4.conf.default.send_redirects=0"}
	if p.DualStack() {
		sysctl = append(sysctl,
			"net.ipv6.conf.all.forwarding=1",
			// IPv6 has no send_redirects: a redirect and a REJECT's ICMPv6
			// port unreachable share the per-peer rate limit, which 0 lifts.
			"net.ipv6.icmp.ratelimit=0")
	}
	return [][]string{
		{"ip", "netns", "add", node},
		{"ip", "-n", node, "link", "set", "lo", "up"},
		sysctl,
	}
}

// HostCommands make h's namespace and link it to the node's, which must exist.
func (p *Plan) HostCommands(h Host) [][]string {
	node := p.Namespace(p.Node.Name)
	nodeAddr := p.Node.Addr.String()
	ns := p.Namespace(h.Name)
	a := h.Addr.String()
	cmds := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		// Made in the node and moved, so no name ever exists in the machine's
		// own namespace.
		{"ip", "-n", node, "link", "add", h.NodeLink, "type", "veth", "peer", "name", "eth0", "netns", ns},
		// The node's end carries the node address: REDIRECT (userspace mode)
		// rewrites a packet to the address of the link it came in on, and drops
		// it when that link has none.
		{"ip", "-n", node, "addr", "add", nodeAddr + "/32", "dev", h.NodeLink},
		{"ip", "-n", node, "link", "set", h.NodeLink, "up"},
		{"ip", "-n", node, "route", "add", a + "/32", "dev", h.NodeLink, "src", nodeAddr},
		{"ip", "-n", ns, "addr", "add", a + "/32", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", nodeAddr + "/32", "dev", "eth0", "scope", "link"},
		// The outside host reaches the node and, as where a network routes
		// Service addresses to the nodes (BGP), the ClusterIPs; not the pods.
		{"ip", "-n", ns, "route", "add", p.ServiceCIDR.String(), "via", nodeAddr, "dev", "eth0", "src", a},
	}
	if h.Role != RoleOutside {
		cmds = append(cmds, []string{"ip", "-n", ns, "route", "add", p.LabCIDR.String(), "via", nodeAddr, "dev", "eth0", "src", a})
	}
	if p.DualStack() {
		cmds = append(cmds, p.hostCommands6(h)...)
	}
	return cmds
}

// hostCommands6 give h and the node's end of its link their IPv6 addresses
// and routes, the same as IPv4's. "nodad": the addresses are the lab's own,
// and duplicate address detection would keep each unusable ("tentative") for
// a second or more.
func (p *Plan) hostCommands6(h Host) [][]string {
	node := p.Namespace(p.Node.Name)
	nodeAddr := p.Node.Addr6.String()
	ns := p.Namespace(h.Name)
	a := h.Addr6.String()
	cmds := [][]string{
		{"ip", "-n", node, "addr", "add", nodeAddr + "/128", "dev", h.NodeLink, "nodad"},
		{"ip", "-n", node, "route", "add", a + "/128", "dev", h.NodeLink, "src", nodeAddr},
		{"ip", "-n", ns, "addr", "add", a + "/128", "dev", "eth0", "nodad"},
		{"ip", "-n", ns, "route", "add", nodeAddr + "/128", "dev", "eth0"},
		{"ip", "-n", ns, "route", "add", p.ServiceCIDR6.String(), "via", nodeAddr, "dev", "eth0", "src", a},
	}
	if h.Role != RoleOutside {
		cmds = append(cmds, []string{"ip", "-n", ns, "route", "add", p.LabCIDR6.String(), "via", nodeAddr, "dev", "eth0", "src", a})
	}
	return cmds
}

// ServiceRouteCommands give the node a route to the Service range of each
// family. A packet the node sends itself needs a route to a ClusterIP before
// netfilter sees it; nat OUTPUT then rewrites it and the kernel routes it
// again, to the pod ("network unreachable" otherwise). They come after a
// first host's link: their source address must already be the node's.
//
// IPv4's goes to lo. IPv6 turns a route via lo into a reject route (the
// kernel's guard against loops), so IPv6's goes to a link of its own: one end
// of a veth pair whose other end stays down, so that a packet nothing
// rewrote or refused is dropped there. (A dummy link would do, but needs a
// kernel module that not every lab machine has.)
func (p *Plan) ServiceRouteCommands() [][]string {
	node := p.Namespace(p.Node.Name)
	cmds := [][]string{{"ip", "-n", node, "route", "add", p.ServiceCIDR.String(), "dev", "lo", "src", p.Node.Addr.String()}}
	if p.DualStack() {
		cmds = append(cmds,
			[]string{"ip", "-n", node, "link", "add", serviceLink6, "type", "veth", "peer", "name", serviceLink6 + "-end"},
			[]string{"ip", "-n", node, "link", "set", serviceLink6, "up"},
			[]string{"ip", "-n", node, "route", "add", p.ServiceCIDR6.String(), "dev", serviceLink6, "src", p.Node.Addr6.String()})
	}
	return cmds
}

// serviceLink6 is the node's link that the IPv6 Service range is routed to.
const serviceLink6 = "services6"

// Run runs one setup command, returning its output in the error.
func Run(ctx context.Context, argv ...string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
