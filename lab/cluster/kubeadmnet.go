package cluster

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// The kubeadm cluster's nodes and their network. The control-plane node
// is the Plan's node, with the client and the outside host linked to it as
// in every lab; the workers are namespaces of their own. All nodes share one
// network, as kind's nodes share a Docker bridge: a namespace holding a
// bridge (the switch), with one port per node and the node's address on its
// eth0. Each node routes the other nodes' pod ranges through their
// addresses, as kindnetd does, so pods reach pods across nodes without NAT.

// MaxNodes is the most nodes `svclab up --nodes` makes: a control-plane node
// and two workers, the cluster the lessons are written for.
const MaxNodes = 3

var (
	// kubeadmPodSubnet is kubeadm's podSubnet: kube-controller-manager gives
	// each node a /kubeadmNodeMask of it, in the order they register (the
	// control-plane node first: 198.19.64.0/24, the Plan's PodCIDR). Inside
	// the cluster range, apart from every host of the Plan and PodPool.
	kubeadmPodSubnet = netip.MustParsePrefix("198.19.64.0/18")
	kubeadmNodeMask  = 24
	// nodesSubnet is the nodes' network on the switch.
	nodesSubnet = netip.MustParsePrefix("198.19.0.0/24")
)

// switchHost names the switch's namespace (Plan.Prefix + "switch") and
// bridge.
const (
	switchHost   = "switch"
	switchBridge = "br0"
	// nodeLink is each node's link to the switch.
	nodeLink = "eth0"
)

// NodeLink is each node's link to the switch, on which it reaches the
// other nodes and they reach it (`svclab trace --node worker1` has packets
// from elsewhere arrive on it).
const NodeLink = nodeLink

// kubeadmNodes are the nodes of a kubeadm cluster of count nodes: the
// Plan's node, the control plane, then worker1, worker2 at the addresses
// after its own. Each has its own directory, processes, and cgroup root
// under the lab's.
func kubeadmNodes(p *topology.Plan, stateDir, cgroupName string, count int) []*Node {
	var nodes []*Node
	addr := p.Node.Addr
	for i := range count {
		name, dir, suffix := p.Node.Name, "node", ""
		if i > 0 {
			name = fmt.Sprintf("worker%d", i)
			dir, suffix = name, "-"+name
			addr = addr.Next()
		}
		nodes = append(nodes, &Node{
			Name:         name,
			Addr:         addr,
			Namespace:    p.Namespace(name),
			DNS:          p.DNS,
			Dir:          filepath.Join(stateDir, dir),
			StateDir:     stateDir,
			Containerd:   "containerd" + suffix,
			Kubelet:      "kubelet" + suffix,
			CgroupRoot:   cgroupName + "/" + name,
			ControlPlane: i == 0,
			Kubeadm:      true,
		})
	}
	return nodes
}

// kubeadmNetCommands render the nodes' network: the switch's namespace and
// bridge; each worker's namespace, as the Plan's node is made (forwarding,
// no ICMP redirects); each node's link to the switch and its address; each
// worker's routes (Services through its own rules, the rest of the lab
// through the control-plane node, where the client and the outside host
// are linked); and the outside host's route to the nodes.
func kubeadmNetCommands(p *topology.Plan, nodes []*Node) [][]string {
	sw := p.Namespace(switchHost)
	cmds := [][]string{
		{"ip", "netns", "add", sw},
		{"ip", "-n", sw, "link", "set", "lo", "up"},
		{"ip", "-n", sw, "link", "add", switchBridge, "type", "bridge"},
		{"ip", "-n", sw, "link", "set", switchBridge, "up"},
		// A switch, not a node: what crosses it is not the business of
		// its netfilter.
		{"ip", "netns", "exec", sw, "sysctl", "-qw",
			"net.bridge.bridge-nf-call-iptables=0", "net.bridge.bridge-nf-call-ip6tables=0"},
	}
	cp := nodes[0]
	bits := nodesSubnet.Bits()
	for _, n := range nodes {
		if !n.ControlPlane {
			cmds = append(cmds,
				[]string{"ip", "netns", "add", n.Namespace},
				[]string{"ip", "-n", n.Namespace, "link", "set", "lo", "up"},
				[]string{"ip", "netns", "exec", n.Namespace, "sysctl", "-qw", "net.ipv4.ip_forward=1",
					"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.default.send_redirects=0"})
		}
		// Made in the switch and moved, so no name ever exists in the
		// machine's own namespace; the switch's end is named after the node.
		cmds = append(cmds,
			[]string{"ip", "-n", sw, "link", "add", n.Name, "type", "veth", "peer", "name", nodeLink, "netns", n.Namespace},
			[]string{"ip", "-n", sw, "link", "set", n.Name, "master", switchBridge, "up"},
			[]string{"ip", "-n", n.Namespace, "addr", "add", fmt.Sprintf("%s/%d", n.Addr, bits), "dev", nodeLink},
			[]string{"ip", "-n", n.Namespace, "link", "set", nodeLink, "up"})
		if !n.ControlPlane {
			cmds = append(cmds,
				// As the Plan's node: a ClusterIP needs a route before the
				// node's own rules rewrite it (ServiceRouteCommands).
				[]string{"ip", "-n", n.Namespace, "route", "add", p.ServiceCIDR.String(), "dev", "lo", "src", n.Addr.String()},
				[]string{"ip", "-n", n.Namespace, "route", "add", p.LabCIDR.String(), "via", cp.Addr.String(), "dev", nodeLink})
		}
	}
	for _, h := range p.Hosts {
		if h.Role == topology.RoleOutside {
			cmds = append(cmds, []string{"ip", "-n", p.Namespace(h.Name), "route", "add", nodesSubnet.String(),
				"via", cp.Addr.String(), "dev", "eth0", "src", h.Addr.String()})
		}
	}
	return cmds
}

// podRouteCommands are the routes kindnetd would add: on each node, every
// other node's pod range through that node's address on the switch.
func podRouteCommands(nodes []*Node) [][]string {
	var cmds [][]string
	for _, n := range nodes {
		for _, o := range nodes {
			if o != n {
				cmds = append(cmds, []string{"ip", "-n", n.Namespace, "route", "replace", o.PodCIDR.String(),
					"via", o.Addr.String(), "dev", nodeLink})
			}
		}
	}
	return cmds
}

// etcHosts is every node's /etc/hosts: the nodes by name, as Docker's
// /etc/hosts names kind's, so kubeadm's preflight and a person on a node
// find them.
func etcHosts(nodes []*Node) string {
	s := "# written by svclab: the kubeadm cluster's nodes\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	for _, n := range nodes {
		s += fmt.Sprintf("%s\t%s\n", n.Addr, n.Name)
	}
	return s
}

// writeExecFiles writes what `ip netns exec` mounts over /etc in each
// node's namespace (`svclab exec worker1 -- CMD`, topology.EtcNetnsDir):
// the node's resolv.conf and /etc/hosts, as its kubelet and kubeadm see
// them, rather than the machine's. On a node of kubeadm's, as on kind's, a
// Service's name does not resolve (the cluster DNS is the pods'); here the
// node's resolver is its own address, where nothing answers, so a name
// fails at once instead of waiting for the machine's resolver, which the
// lab cannot reach. The nodes' names resolve through /etc/hosts.
func writeExecFiles(etcNetns string, nodes []*Node) error {
	for _, n := range nodes {
		dir := filepath.Join(etcNetns, n.Namespace)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(n.resolvConf()), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(etcHosts(nodes)), 0o644); err != nil {
			return err
		}
	}
	return nil
}
