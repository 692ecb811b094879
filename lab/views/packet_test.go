package views

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// TestTracePacketOnAWorker: `svclab trace --node worker1` on the kubeadm
// cluster. From worker1 itself a packet is the node's own; from the
// control-plane node, another worker, the client or the outside host it
// arrives over the switch, which only a packet to worker1's own address
// (a NodePort) does untouched: to a ClusterIP, the sender's node's rules
// have sent it on to a pod already, and the trace says where to look.
func TestTracePacketOnAWorker(t *testing.T) {
	p := topology.DefaultPlan()
	worker1 := topology.Host{Name: "worker1", Role: topology.RoleNode, Addr: netip.MustParseAddr("198.19.0.2")}
	worker2 := topology.Host{Name: "worker2", Role: topology.RoleNode, Addr: netip.MustParseAddr("198.19.0.3")}
	on := *p
	on.Node, on.Gateway, on.Uplink = worker1, p.Node, "eth0"
	net := topology.New(topology.Config{Plan: &on, StateDir: t.TempDir()})
	require.NoError(t, net.RecordHost(worker1))
	require.NoError(t, net.RecordHost(worker2))
	v := New(Config{Net: net})
	snap := loadManifests(t)

	pkt, port, err := v.tracePacket(snap, TraceOptions{From: "worker1", Target: "web"})
	require.NoError(t, err)
	require.True(t, pkt.local)
	require.Equal(t, "198.19.0.2", pkt.src.String())
	require.Equal(t, "default/web:http", port.Name.String())

	for _, from := range []string{"node", "worker2", "outside", "client"} {
		pkt, port, err := v.tracePacket(snap, TraceOptions{From: from, Target: "198.19.0.2:30080"})
		require.NoError(t, err, from)
		require.False(t, pkt.local, from)
		require.Equal(t, "eth0", pkt.inIface, from)
		h, _ := net.Host(from)
		require.Equal(t, h.Addr, pkt.src, from)
		require.Equal(t, "default/web-nodeport:http", port.Name.String(), from)
	}

	_, _, err = v.tracePacket(snap, TraceOptions{From: "worker2", Target: "web"})
	require.ErrorContains(t, err, "worker2's packets meet worker2's rules first")
	require.ErrorContains(t, err, "trace with --node worker2")
	_, _, err = v.tracePacket(snap, TraceOptions{From: "client", Target: "web"})
	require.ErrorContains(t, err, "client's packets meet node's rules first")
	require.ErrorContains(t, err, "198.19.0.2:PORT")

	require.Equal(t, "198.19.0.1 (node)", net.WithName(p.Node.Addr), "the control-plane node keeps its name")
	require.Equal(t, []string{"worker1", "node", "client", "web-0", "web-1", "web-2", "db-0", "db-1", "outside", "worker2"}, net.HostNames())
}
