package cluster

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// TestKubeadmNodes checks the nodes' names, addresses and what keeps them
// apart: directories, processes, cgroup roots.
func TestKubeadmNodes(t *testing.T) {
	p := topology.DefaultPlan()
	nodes := kubeadmNodes(p, "/run/svclab", topology.CgroupRoot, 3)
	require.Len(t, nodes, 3)
	want := []struct{ name, addr, dir, containerd, kubelet string }{
		{"node", "198.19.0.1", "/run/svclab/node", "containerd", "kubelet"},
		{"worker1", "198.19.0.2", "/run/svclab/worker1", "containerd-worker1", "kubelet-worker1"},
		{"worker2", "198.19.0.3", "/run/svclab/worker2", "containerd-worker2", "kubelet-worker2"},
	}
	for i, w := range want {
		n := nodes[i]
		require.Equal(t, w.name, n.Name)
		require.Equal(t, netip.MustParseAddr(w.addr), n.Addr)
		require.Equal(t, "svclab-"+w.name, n.Namespace)
		require.Equal(t, w.dir, n.Dir)
		require.Equal(t, w.containerd, n.Containerd)
		require.Equal(t, w.kubelet, n.Kubelet)
		require.Equal(t, "svclab/"+w.name, n.CgroupRoot)
		require.Equal(t, i == 0, n.ControlPlane)
		require.True(t, n.Kubeadm)
		require.True(t, nodesSubnet.Contains(n.Addr))
	}
	// The control-plane node is the Plan's node: the lab's views, trace
	// and client find it where they always do.
	pn := planNode(p, "/run/svclab", topology.CgroupRoot)
	require.Equal(t, pn.Name, nodes[0].Name)
	require.Equal(t, pn.Dir, nodes[0].Dir)
	require.Equal(t, pn.Containerd, nodes[0].Containerd)
	require.Equal(t, pn.Kubelet, nodes[0].Kubelet)
	require.True(t, kubeadmPodSubnet.Contains(p.PodCIDR.Addr()), "the Plan's pod range is the first node's of podSubnet")
}

// TestKubeadmNetCommands checks the nodes' network stays in the lab's
// namespaces: every command names one, every link is made inside one.
func TestKubeadmNetCommands(t *testing.T) {
	p := topology.DefaultPlan()
	nodes := kubeadmNodes(p, "/run/svclab", topology.CgroupRoot, 3)
	cmds := kubeadmNetCommands(p, nodes)
	var text []string
	for _, c := range cmds {
		line := strings.Join(c, " ")
		text = append(text, line)
		require.True(t, strings.HasPrefix(line, "ip netns add svclab-") || strings.HasPrefix(line, "ip -n svclab-") ||
			strings.HasPrefix(line, "ip netns exec svclab-"), "a command outside the lab's namespaces: %s", line)
	}
	all := strings.Join(text, "\n") + "\n"
	for _, want := range []string{
		"ip netns add svclab-switch\n",
		"ip -n svclab-switch link add br0 type bridge\n",
		"ip netns exec svclab-switch sysctl -qw net.bridge.bridge-nf-call-iptables=0 net.bridge.bridge-nf-call-ip6tables=0\n",
		"ip netns add svclab-worker1\n",
		"ip -n svclab-switch link add worker2 type veth peer name eth0 netns svclab-worker2\n",
		"ip -n svclab-switch link set node master br0 up\n",
		"ip -n svclab-node addr add 198.19.0.1/24 dev eth0\n",
		"ip -n svclab-worker1 addr add 198.19.0.2/24 dev eth0\n",
		"ip -n svclab-worker1 route add 198.18.0.0/16 dev lo src 198.19.0.2\n",
		"ip -n svclab-worker2 route add 198.19.0.0/16 via 198.19.0.1 dev eth0\n",
		"ip -n svclab-outside route add 198.19.0.0/24 via 198.19.0.1 dev eth0 src 198.19.200.2\n",
	} {
		require.Contains(t, all, want)
	}
	require.NotContains(t, all, "ip netns add svclab-node\n", "the Plan's node is made by the Plan")

	for i, n := range nodes {
		n.PodCIDR = netip.MustParsePrefix([]string{"198.19.64.0/24", "198.19.65.0/24", "198.19.66.0/24"}[i])
	}
	routes := podRouteCommands(nodes)
	require.Len(t, routes, 6)
	require.Contains(t, routes, []string{"ip", "-n", "svclab-worker1", "route", "replace", "198.19.66.0/24", "via", "198.19.0.3", "dev", "eth0"})
	require.Contains(t, routes, []string{"ip", "-n", "svclab-node", "route", "replace", "198.19.65.0/24", "via", "198.19.0.2", "dev", "eth0"})
}

func TestEtcHosts(t *testing.T) {
	p := topology.DefaultPlan()
	h := etcHosts(kubeadmNodes(p, "/run/svclab", topology.CgroupRoot, 2))
	require.Contains(t, h, "127.0.0.1\tlocalhost\n")
	require.Contains(t, h, "198.19.0.1\tnode\n")
	require.Contains(t, h, "198.19.0.2\tworker1\n")
	require.NotContains(t, h, "worker2")
}

// TestWriteExecFiles: each node's namespace gets its own resolv.conf (its
// own address: nothing answers, a name fails at once) and the nodes'
// /etc/hosts, for `svclab exec NODE`.
func TestWriteExecFiles(t *testing.T) {
	dir := t.TempDir()
	nodes := kubeadmNodes(topology.DefaultPlan(), "/run/svclab", topology.CgroupRoot, 3)
	require.NoError(t, writeExecFiles(dir, nodes))
	for _, n := range nodes {
		rc, err := os.ReadFile(filepath.Join(dir, n.Namespace, "resolv.conf"))
		require.NoError(t, err)
		require.Contains(t, string(rc), "nameserver "+n.Addr.String()+"\n")
		hosts, err := os.ReadFile(filepath.Join(dir, n.Namespace, "hosts"))
		require.NoError(t, err)
		require.Equal(t, etcHosts(nodes), string(hosts))
	}
	require.DirExists(t, filepath.Join(dir, "svclab-worker2"))
}

// TestNodesOnAWorker: a lab that looks at a worker (svclab rules --node
// worker1: the Plan's Node is worker1, its Gateway the first node) still
// has the kubeadm cluster's nodes under their own names, directories and
// processes, so that what it reads of a node (SocketLBOf) is that node's.
func TestNodesOnAWorker(t *testing.T) {
	p := topology.DefaultPlan()
	worker1 := topology.Host{Name: "worker1", Role: topology.RoleNode, Addr: netip.MustParseAddr("198.19.0.2")}
	on := *p
	on.Node, on.Gateway, on.Uplink = worker1, p.Node, NodeLink
	dir := t.TempDir()
	net := topology.New(topology.Config{Plan: &on, StateDir: dir})
	require.NoError(t, net.WriteState(topology.State{Mode: "socklb", Nodes: 3}))
	got := New(Config{Net: net}).Nodes()
	want := kubeadmNodes(p, dir, topology.CgroupRoot, 3)
	require.Equal(t, want, got)

	_, err := New(Config{Net: net}).SocketLBOf("worker3")
	require.ErrorContains(t, err, `node "worker3": not a node of the cluster`)
}
