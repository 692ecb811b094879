package nftables

import (
	"testing"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
)

// kube-proxy's "same node to LB, SNATted" flows on the real kernel: a
// connection with the LoadBalancer IP as its source is accepted while the
// source ranges hold the node's IP (offloadtest.CheckLoadBalancerSNATted).
func TestKernelSourceRangesSNATted(t *testing.T) {
	l := newLab(t)
	l.cfg.NodeIP = offloadtest.NodeAddr
	l.CheckLoadBalancerSNATted(t, l.syncer(t, l.dataplane(t)))
}
