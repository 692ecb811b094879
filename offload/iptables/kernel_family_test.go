package iptables

import (
	"testing"

	"github.com/svcproxy/svcproxy/internal/ruletest"
	"github.com/svcproxy/svcproxy/service"
)

// The IPv6 checks both rule-writing paths share (internal/ruletest): a
// dual-stack Service with a Proxier per family, a UDP flow that moves when its
// endpoint leaves, and a one-way sender whose endpoints go to zero refused,
// in the IPv6 conntrack table.
func TestKernelDualStack(t *testing.T) { ruletest.KernelDualStack(t, kernelRules) }
func TestKernelUDPConntrackIPv6(t *testing.T) {
	ruletest.KernelUDPConntrack(t, kernelRules, service.IPv6)
}
func TestKernelUDPOneWayToZeroIPv6(t *testing.T) {
	ruletest.KernelUDPOneWayToZero(t, kernelRules, service.IPv6)
}
