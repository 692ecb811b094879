package iptables

import (
	"testing"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// loadBalancerSourceRanges on the real kernel: the client reaches the LoadBalancer
// IP while its address is in the ranges, and its SYN is dropped when it is not.
func TestKernelSourceRanges(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	p := l.dataplane(t)
	l.sync(t, p, l.Web(st.WithLoadBalancer("198.18.200.1"), st.WithSourceRanges("198.19.10.0/24")))
	if _, err := offloadtest.Dial(l.Client, "198.18.200.1:80", 3); err != nil {
		t.Errorf("from inside the source ranges: %v", err)
	}
	l.sync(t, p, l.Web(st.WithLoadBalancer("198.18.200.1"), st.WithSourceRanges("203.0.113.0/24")))
	if err := l.Client.DialDropped("198.18.200.1:80"); err != nil {
		t.Errorf("from outside the source ranges: %v", err)
	}
	if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 1); err != nil {
		t.Errorf("the ClusterIP is not subject to the source ranges: %v", err)
	}
}

// kube-proxy's "same node to LB, SNATted" flows on the real kernel: a
// connection with the LoadBalancer IP as its source is accepted while the
// source ranges hold the node's IP (offloadtest.CheckLoadBalancerSNATted).
func TestKernelSourceRangesSNATted(t *testing.T) {
	l := newLab(t)
	l.cfg.NodeIP = offloadtest.NodeAddr
	l.CheckLoadBalancerSNATted(t, l.syncer(t, l.dataplane(t)))
}
