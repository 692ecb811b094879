package iptables

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// Real-kernel tests: the rules applied with iptables-restore in a node namespace,
// real sockets in client and backend namespaces. They need root.

// The checks both rule-writing paths share (internal/ruletest), on this one:
// spread, topology hints, affinity, NodePorts, UDP conntrack cleanup (also at
// a new process's first sync, and for a one-way sender whose endpoints go to
// zero), externalIPs and LoadBalancer IPs (ipMode Proxy not captured),
// loadBalancerSourceRanges (also for the node's own SNATted packets),
// the node's own connections and REJECT, a restart without a gap and
// Cleanup, established connections that outlive their endpoint, hairpin
// traffic, the connection counters, policy Local with a health check, the
// repair of flushed tables.
func TestKernelSpread(t *testing.T)       { ruletest.KernelSpread(t, kernelRules) }
func TestKernelTopology(t *testing.T)     { ruletest.KernelTopology(t, kernelRules) }
func TestKernelAffinity(t *testing.T)     { ruletest.KernelAffinity(t, kernelRules) }
func TestKernelNodePort(t *testing.T)     { ruletest.KernelNodePort(t, kernelRules) }
func TestKernelUDPConntrack(t *testing.T) { ruletest.KernelUDPConntrack(t, kernelRules, service.IPv4) }
func TestKernelFirstSyncUDPConntrack(t *testing.T) {
	ruletest.KernelFirstSyncUDPConntrack(t, kernelRules)
}
func TestKernelUDPOneWayToZero(t *testing.T) {
	ruletest.KernelUDPOneWayToZero(t, kernelRules, service.IPv4)
}
func TestKernelSourceRanges(t *testing.T)        { ruletest.KernelSourceRanges(t, kernelRules) }
func TestKernelSourceRangesSNATted(t *testing.T) { ruletest.KernelSourceRangesSNATted(t, kernelRules) }
func TestKernelExternalAndLoadBalancer(t *testing.T) {
	ruletest.KernelExternalAndLoadBalancer(t, kernelRules)
}
func TestKernelLocalAndReject(t *testing.T)     { ruletest.KernelLocalAndReject(t, kernelRules) }
func TestKernelRestartAndCleanup(t *testing.T)  { ruletest.KernelRestartAndCleanup(t, kernelRules) }
func TestKernelEstablishedSurvive(t *testing.T) { ruletest.KernelEstablishedSurvive(t, kernelRules) }
func TestKernelHairpin(t *testing.T)            { ruletest.KernelHairpin(t, kernelRules) }
func TestKernelConnections(t *testing.T)        { ruletest.KernelConnections(t, kernelRules) }
func TestKernelLocalWithHealthCheck(t *testing.T) {
	ruletest.KernelLocalWithHealthCheck(t, kernelRules)
}

// Another program flushes the nat table, or flushes and deletes every chain
// of nat and filter (a firewall reload): the next periodic check of the hooks
// notices, and that sync puts everything back.
func TestKernelFlushedTableRepaired(t *testing.T) {
	restore := func(rules string) func(t *testing.T, l *offloadtest.Lab) {
		return func(t *testing.T, l *offloadtest.Lab) {
			cmd := l.Node.Command(context.Background(), "iptables-restore")
			cmd.Stdin = strings.NewReader(rules)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("iptables-restore: %v: %s", err, out)
			}
		}
	}
	ruletest.KernelRepaired(t, kernelRules,
		ruletest.Loss{Name: "the nat table flushed", Do: restore("*nat\n-F\nCOMMIT\n")},
		// iptables-restore without --noflush empties each table it is given
		// and deletes its chains: a firewall reload.
		ruletest.Loss{Name: "nat and filter reset", Do: restore("*nat\nCOMMIT\n*filter\nCOMMIT\n")},
	)
}

// Chains that belong to nothing any more are deleted in the same transaction that
// drops the jumps to them: by a partial sync (from what it applied) and by a new
// Proxier's full sync (from iptables-save).
func TestKernelStaleChains(t *testing.T) {
	l := ruletest.NewLab(t, kernelRules)
	two := st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(8080), st.WithNodePort(30080)),
		st.Service("api", "198.18.0.20", 80, l.Endpoints(8080), st.WithAffinity(time.Minute)))
	p := l.Mode(t, ruletest.Options{})
	l.Sync(t, p, two)
	l.Sync(t, p, l.Web()) // partial: api goes, web loses its NodePort
	save := l.Node.Run(t, "iptables-save", "-t", "nat")
	if strings.Contains(save, "default/api") || strings.Contains(save, prefixEXT) {
		t.Errorf("after a partial sync, stale chains are left:\n%s", save)
	}
	l.Sync(t, l.Mode(t, ruletest.Options{}), two)           // restarted with both
	l.Sync(t, l.Mode(t, ruletest.Options{}), st.Snapshot()) // restarted with none: a full sync reads what is there
	save = l.Node.Run(t, "iptables-save", "-t", "nat")
	for _, prefix := range portChainPrefixes {
		if strings.Contains(save, prefix) {
			t.Errorf("after a full sync of nothing, %s chains are left:\n%s", prefix, save)
		}
	}
}
