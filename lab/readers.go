package lab

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/client-go/kubernetes"

	"github.com/svcproxy/svcproxy/internal/nsenter"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/lab/topology"
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
