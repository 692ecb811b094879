package lab

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/client-go/kubernetes"

	"github.com/svcproxy/svcproxy/internal/nsenter"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/lab/views"
)

// What `svclab check` reads beyond the Services (lab/exercise's IPVSLab
// and ClusterLab).

// IPVS calls read with the node's IPVS, read with kernel/ipvs (netlink, as
// ipvsadm reads it) from a thread in the node's network namespace.
func (l *Lab) IPVS(ctx context.Context, read func(kipvs.Interface) error) error {
	return nsenter.Run(filepath.Join(topology.NetnsDir, l.net.NodeNamespace()), func() error {
		k, err := kipvs.New()
		if err != nil {
			return err
		}
		defer k.Close()
		return read(k)
	})
}

// Client is a clientset for the lab's API server, as its administrator
// (see cluster.Cluster.Client).
func (l *Lab) Client() (kubernetes.Interface, error) { return l.cluster.Client() }

// ProxyGet GETs path from the metrics server of the proxy on the lab's
// real node named node (svcproxy's or kube-proxy's), from inside it.
func (l *Lab) ProxyGet(ctx context.Context, node, path string) (string, error) {
	for _, n := range l.cluster.Nodes() {
		if n.Name == node {
			return n.MetricsGet(ctx, path)
		}
	}
	return "", fmt.Errorf("node %q: not a node of the lab", node)
}

// socketLB is where the socket LB of the node the views look at runs, in
// socklb mode (views.Config.SocketLB): on the kubeadm cluster, each node's
// svcproxy attaches at its kubelet's cgroup root and pins in the node's own
// bpffs, in its mount namespace (cluster.Cluster.SocketLBOf); on the other
// labs, at the lab's cgroup2 subtree and in the lab's bpffs.
func (l *Lab) socketLB() (views.SocketLB, error) {
	st, err := l.net.ReadState()
	if err != nil {
		return views.SocketLB{}, err
	}
	if st.Nodes == 0 {
		return views.LabSocketLB(l.net), nil
	}
	node := l.cfg.Plan.Node.Name
	at, err := l.cluster.SocketLBOf(node)
	if err != nil {
		return views.SocketLB{}, err
	}
	return views.SocketLB{
		Cgroup:   at.Cgroup,
		CgroupIs: node + "'s kubelet's cgroup root, which holds its pods",
		PinPath:  at.PinPath,
		Where:    node + "'s own bpffs, in its mount namespace",
		Pods:     node + "'s pods",
		Open: func() (views.SocketLBMaps, error) {
			p, err := ksocklb.OpenPinned(at.Reach)
			if err != nil {
				return nil, err
			}
			return p, nil
		},
	}, nil
}
