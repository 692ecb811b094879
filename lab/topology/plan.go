package topology

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// Role is what a lab host is for.
type Role string

// The roles of lab hosts.
const (
	RoleNode   Role = "node"   // runs svcproxy and clusterdns; routes for everyone
	RoleClient Role = "client" // sends the traffic
	RolePod    Role = "pod"    // runs a Pod server behind Services
	// RoleOutside is a host beyond the cluster's range (a laptop, a load
	// balancer), routed to the node: traffic from it to a Service is
	// masqueraded, as off-cluster traffic is, and it reaches NodePorts.
	RoleOutside Role = "outside"
)

// Host is one network namespace of the lab.
type Host struct {
	Name string // "web-0"; the namespace is Plan.Prefix+Name
	Role Role
	Addr netip.Addr
	// Addr6 is the host's IPv6 address: its IPv4 one written into the lab's
	// IPv6 range (Plan.IPv6Of), 198.19.1.10 as 2001:db8:19::1:10.
	Addr6 netip.Addr
	// NodeLink is the node's end of the veth pair to this host ("" for the node).
	// The host's end is always eth0, as in a pod.
	NodeLink string
	// TCP and UDP are the ports a pod's server answers on.
	TCP, UDP []uint16
}

// Plan is the lab's topology. Its zero value is not useful; start from
// DefaultPlan.
type Plan struct {
	// Prefix starts every namespace name, so that `svclab down` can find them all.
	Prefix string
	Node   Host
	// Hosts are the client, the pods and the outside host, each linked to
	// the node.
	Hosts []Host

	ServiceCIDR netip.Prefix // the ClusterIPs
	// ClusterCIDR holds the node, the pods and the client: svcproxy's
	// --cluster-cidr. Traffic from beyond it to a ClusterIP is masqueraded.
	ClusterCIDR netip.Prefix
	// LabCIDR holds every lab address, the outside host's too: the range
	// pods route via the node.
	LabCIDR netip.Prefix
	// PodCIDR is where the real node's pods get their addresses (the bridge
	// CNI's host-local range, `svclab up --kubelet`); its first address is
	// the node's, on the bridge. Inside ClusterCIDR, apart from every host.
	PodCIDR netip.Prefix
	// DNS is the kube-dns Service's ClusterIP, the nameserver of every pod.
	DNS netip.Addr
	// Search is the resolv.conf search list of a pod in namespace "default".
	Search []string

	// The IPv6 ranges of a dual-stack lab: each host also has an IPv6
	// address (Host.Addr6), the node routes both families, and Services may
	// have a ClusterIP of each family (ipFamilyPolicy).
	ServiceCIDR6 netip.Prefix // 2001:db8:18::/112
	ClusterCIDR6 netip.Prefix // the node, the pods and the client
	LabCIDR6     netip.Prefix // every lab host, the outside one too
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// DefaultPlan is the lab that manifests.yaml describes: dual-stack, each
// host's IPv6 address mirroring its IPv4 one (IPv6Of).
func DefaultPlan() *Plan {
	web := []uint16{8080}
	p := &Plan{
		Prefix: "svclab-",
		Node:   Host{Name: "node", Role: RoleNode, Addr: addr("198.19.0.1")},
		Hosts: []Host{
			{Name: "client", Role: RoleClient, Addr: addr("198.19.1.2"), NodeLink: "veth-client"},
			{Name: "web-0", Role: RolePod, Addr: addr("198.19.1.10"), NodeLink: "veth-web-0", TCP: web, UDP: web},
			{Name: "web-1", Role: RolePod, Addr: addr("198.19.1.11"), NodeLink: "veth-web-1", TCP: web, UDP: web},
			{Name: "web-2", Role: RolePod, Addr: addr("198.19.1.12"), NodeLink: "veth-web-2", TCP: web, UDP: web},
			{Name: "db-0", Role: RolePod, Addr: addr("198.19.1.20"), NodeLink: "veth-db-0", TCP: []uint16{5432}},
			{Name: "db-1", Role: RolePod, Addr: addr("198.19.1.21"), NodeLink: "veth-db-1", TCP: []uint16{5432}},
			{Name: "outside", Role: RoleOutside, Addr: addr("198.19.200.2"), NodeLink: "veth-outside"},
		},
		ServiceCIDR: netip.MustParsePrefix("198.18.0.0/16"),
		ClusterCIDR: netip.MustParsePrefix("198.19.0.0/17"),
		LabCIDR:     netip.MustParsePrefix("198.19.0.0/16"),
		// Far from the Plan's hosts (198.19.0-2.x) and PodPool.
		PodCIDR: netip.MustParsePrefix("198.19.64.0/24"),
		DNS:     addr("198.18.0.10"),
		Search:  []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"},
		// Documentation prefixes (RFC 3849), never routed anywhere. The
		// cluster range holds 2001:db8:19::0:0 to ::ff:ffff, the mirrors of
		// 198.19.0.0 to 198.19.99.255: every lab host's but the outside
		// host's (2001:db8:19::200:2).
		ServiceCIDR6: netip.MustParsePrefix("2001:db8:18::/112"),
		ClusterCIDR6: netip.MustParsePrefix("2001:db8:19::/104"),
		LabCIDR6:     netip.MustParsePrefix("2001:db8:19::/64"),
	}
	p.Node.Addr6 = p.IPv6Of(p.Node.Addr)
	for i := range p.Hosts {
		p.Hosts[i].Addr6 = p.IPv6Of(p.Hosts[i].Addr)
	}
	return p
}

// IPv6Of is the lab's IPv6 address that mirrors IPv4 address a, so that a
// learner reads one from the other: the last two parts of a, each written as
// it reads in decimal, end the IPv6 range of a's own (pods and nodes in
// 198.19.0.0/16: LabCIDR6; Services in 198.18.0.0/16: ServiceCIDR6).
// 198.19.1.10 is 2001:db8:19::1:10, 198.18.0.24 is 2001:db8:18::24. It is
// the invalid Addr when the lab has no IPv6 range for a.
func (p *Plan) IPv6Of(a netip.Addr) netip.Addr {
	var base netip.Prefix
	switch {
	case p.LabCIDR.Contains(a):
		base = p.LabCIDR6
	case p.ServiceCIDR.Contains(a):
		base = p.ServiceCIDR6
	}
	if !base.IsValid() || !a.Is4() {
		return netip.Addr{}
	}
	b := base.Addr().As16()
	v4 := a.As4()
	for i, part := range v4[2:] {
		// "10" read as hexadecimal: 0x10. Three decimal digits fit 16 bits.
		var x uint16
		for _, d := range fmt.Sprint(part) {
			x = x<<4 | uint16(d-'0')
		}
		b[12+2*i], b[13+2*i] = byte(x>>8), byte(x)
	}
	return netip.AddrFrom16(b)
}

// DualStack says whether the lab has IPv6 ranges (the default plan does).
func (p *Plan) DualStack() bool { return p.LabCIDR6.IsValid() }

// Namespace is the network namespace of the host named name.
func (p *Plan) Namespace(name string) string { return p.Prefix + name }

// Host returns the host named name, the node included.
func (p *Plan) Host(name string) (Host, bool) {
	if name == p.Node.Name {
		return p.Node, true
	}
	for _, h := range p.Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return Host{}, false
}

// Pods are the hosts that run a Pod server.
func (p *Plan) Pods() []Host {
	var pods []Host
	for _, h := range p.Hosts {
		if h.Role == RolePod {
			pods = append(pods, h)
		}
	}
	return pods
}

// Names maps each host's address to its name, for reports.
func (p *Plan) Names() map[netip.Addr]string {
	m := map[netip.Addr]string{}
	for _, h := range append([]Host{p.Node}, p.Hosts...) {
		m[h.Addr] = h.Name
		if h.Addr6.IsValid() {
			m[h.Addr6] = h.Name
		}
	}
	return m
}

// Validate checks what would make Commands fail half-way: names, addresses
// and link names.
func (p *Plan) Validate() error {
	seenName := map[string]bool{}
	seenAddr := map[netip.Addr]bool{}
	for _, h := range append([]Host{p.Node}, p.Hosts...) {
		switch {
		case h.Name == "" || strings.ContainsAny(h.Name, "/ \t"):
			return fmt.Errorf("host %q: name: must be non-empty, without slashes or spaces", h.Name)
		case seenName[h.Name]:
			return fmt.Errorf("host %s: name: used twice", h.Name)
		case h.Role == RoleOutside && (p.ClusterCIDR.Contains(h.Addr) || !p.LabCIDR.Contains(h.Addr)):
			return fmt.Errorf("host %s: addr %s: want an address of the lab range %s beyond the cluster range %s", h.Name, h.Addr, p.LabCIDR, p.ClusterCIDR)
		case h.Role != RoleOutside && !p.ClusterCIDR.Contains(h.Addr):
			return fmt.Errorf("host %s: addr %s: not in the cluster range %s", h.Name, h.Addr, p.ClusterCIDR)
		case seenAddr[h.Addr]:
			return fmt.Errorf("host %s: addr %s: used twice", h.Name, h.Addr)
		case h.Role != RoleNode && (h.NodeLink == "" || len(h.NodeLink) > 15):
			// IFNAMSIZ is 16 bytes with the terminating NUL.
			return fmt.Errorf("host %s: node link %q: must be 1 to 15 characters", h.Name, h.NodeLink)
		}
		if err := p.validate6(h, seenAddr); err != nil {
			return err
		}
		seenName[h.Name], seenAddr[h.Addr] = true, true
	}
	if !p.LabCIDR.Contains(p.ClusterCIDR.Addr()) || p.LabCIDR.Bits() > p.ClusterCIDR.Bits() {
		return fmt.Errorf("lab range %s: must hold the cluster range %s", p.LabCIDR, p.ClusterCIDR)
	}
	if p.DualStack() && (!p.LabCIDR6.Contains(p.ClusterCIDR6.Addr()) || p.LabCIDR6.Bits() > p.ClusterCIDR6.Bits()) {
		return fmt.Errorf("lab range %s: must hold the cluster range %s", p.LabCIDR6, p.ClusterCIDR6)
	}
	if err := p.validatePodCIDR(); err != nil {
		return err
	}
	if !p.ServiceCIDR.Contains(p.DNS) {
		return fmt.Errorf("dns %s: not in the service range %s", p.DNS, p.ServiceCIDR)
	}
	return nil
}

// validatePodCIDR checks that the real node's pod range, when there is one,
// is in the cluster range and holds no host of the Plan, nor PodPool.
func (p *Plan) validatePodCIDR() error {
	c := p.PodCIDR
	if !c.IsValid() {
		return nil
	}
	if !c.Addr().Is4() || !p.ClusterCIDR.Contains(c.Addr()) || c.Bits() < p.ClusterCIDR.Bits() || c.Bits() > 30 {
		return fmt.Errorf("pod range %s: want an IPv4 range of 4 addresses or more in the cluster range %s", c, p.ClusterCIDR)
	}
	if c.Overlaps(PodPool) {
		return fmt.Errorf("pod range %s: overlaps the lab kubelet's pod pool %s", c, PodPool)
	}
	for _, h := range append([]Host{p.Node}, p.Hosts...) {
		if c.Contains(h.Addr) {
			return fmt.Errorf("pod range %s: holds host %s's address %s", c, h.Name, h.Addr)
		}
	}
	return nil
}

// validate6 checks h's IPv6 address: there in a dual-stack plan, in the
// ranges its role asks for, and used once.
func (p *Plan) validate6(h Host, seen map[netip.Addr]bool) error {
	a := h.Addr6
	switch {
	case !p.DualStack() && a.IsValid():
		return fmt.Errorf("host %s: addr6 %s: the plan has no IPv6 ranges", h.Name, a)
	case !p.DualStack():
		return nil
	case !a.Is6() || a.Is4In6():
		return fmt.Errorf("host %s: addr6 %q: want an IPv6 address", h.Name, a)
	case h.Role == RoleOutside && (p.ClusterCIDR6.Contains(a) || !p.LabCIDR6.Contains(a)):
		return fmt.Errorf("host %s: addr6 %s: want an address of the lab range %s beyond the cluster range %s", h.Name, a, p.LabCIDR6, p.ClusterCIDR6)
	case h.Role != RoleOutside && !p.ClusterCIDR6.Contains(a):
		return fmt.Errorf("host %s: addr6 %s: not in the cluster range %s", h.Name, a, p.ClusterCIDR6)
	case seen[a]:
		return fmt.Errorf("host %s: addr6 %s: used twice", h.Name, a)
	}
	seen[a] = true
	return nil
}

// ResolvConf is the resolv.conf of the client and the pods: the kubelet's
// for a pod in namespace "default" with dnsPolicy ClusterFirst.
func (p *Plan) ResolvConf() string {
	return fmt.Sprintf("# written by svclab, as the kubelet writes a pod's\nnameserver %s\nsearch %s\noptions ndots:5\n",
		p.DNS, strings.Join(p.Search, " "))
}

// OutsideResolvConf is the outside host's: it asks the cluster DNS by its
// address, as a machine configured to do so would, without a pod's search
// list (full names only).
func (p *Plan) OutsideResolvConf() string {
	return fmt.Sprintf("# written by svclab: outside the cluster, no search list\nnameserver %s\n", p.DNS)
}

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

// PodPool is where pods beyond the Plan get their addresses, lowest free
// first: web-3 after `kubectl scale statefulset web --replicas=4` (the
// control-plane lab's kubelet gives them out).
var PodPool = netip.MustParsePrefix("198.19.2.0/24")
