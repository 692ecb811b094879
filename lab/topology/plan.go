package topology

import (
	"fmt"
	"net/netip"
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
	// the node (to Gateway when it is set).
	Hosts []Host
	// Gateway is set when Node is another node of a cluster than the one
	// the Hosts are linked to (`svclab trace --node worker1` reads worker1's
	// rules; the client and the outside host hang off the control-plane
	// node, Gateway); Uplink is then Node's link to the other nodes.
	Gateway Host
	Uplink  string

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
	if p.Gateway.Name != "" && name == p.Gateway.Name {
		return p.Gateway, true
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
	for _, h := range append([]Host{p.Node, p.Gateway}, p.Hosts...) {
		if h.Name == "" {
			continue // no Gateway
		}
		m[h.Addr] = h.Name
		if h.Addr6.IsValid() {
			m[h.Addr6] = h.Name
		}
	}
	return m
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

// PodPool is where pods beyond the Plan get their addresses, lowest free
// first: web-3 after `kubectl scale statefulset web --replicas=4` (the
// control-plane lab's kubelet gives them out).
var PodPool = netip.MustParsePrefix("198.19.2.0/24")
