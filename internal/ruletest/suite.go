package ruletest

import (
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

// Suite is one rule-writing path as the shared tables ask it: its mode on a
// Fake, its renderer, and the few answers that are its own.
type Suite struct {
	Path Path
	// Render renders a Snapshot as the path writes it: the text of its
	// golden files (CheckRenderGolden, CheckFamiliesGolden) and what
	// CheckInvalidNodes asks.
	Render Renderer
	// Rendered says what that text is, as a reader meets it: "as
	// iptables-restore reads it".
	Rendered string
	// TraceCases are the path's own answers to CheckTrace, where the two
	// paths answer differently.
	TraceCases []TraceCase
	// Compare is how the state a partial sync leaves compares with what a
	// full sync writes (CheckPartialSyncs, CheckEveryField); nil: equal.
	Compare Compare
}

// Run asks s.Path every question of the tables both paths share, through
// its Fake and that Fake's tracer, one subtest each, named after its check
// (Trace: CheckTrace). A path's tests call it once, as TestShared; what they
// add beside it is the path's own.
func Run(t *testing.T, s Suite) {
	p := s.Path
	for _, c := range []struct {
		name  string
		check func(t *testing.T)
	}{
		// Rendering: the golden files of the Snapshots both render, and
		// the nodes both refuse.
		{"RenderGolden", func(t *testing.T) { CheckRenderGolden(t, s.Render, s.Rendered) }},
		{"FamiliesGolden", func(t *testing.T) { CheckFamiliesGolden(t, s.Render, s.Rendered) }},
		{"InvalidNodes", func(t *testing.T) { CheckInvalidNodes(t, s.Render) }},
		// Where a packet goes: kube-proxy's tracePacket questions.
		{"Trace", func(t *testing.T) { CheckTrace(t, p, s.TraceCases...) }},
		{"TraceIPv6", func(t *testing.T) { CheckTraceIPv6(t, p) }},
		{"EvenSpread", func(t *testing.T) { CheckEvenSpread(t, p) }},
		{"Affinity", func(t *testing.T) { CheckAffinity(t, p) }},
		{"TopologyHints", func(t *testing.T) { CheckTopologyHints(t, p) }},
		{"SourceRanges", func(t *testing.T) { CheckSourceRanges(t, p) }},
		{"LoadBalancer", func(t *testing.T) { CheckLoadBalancer(t, p) }},
		// How syncs go: partial ones converge on what a full one writes.
		{"PartialSyncs", func(t *testing.T) { CheckPartialSyncs(t, p, s.Compare) }},
		{"EveryField", func(t *testing.T) { CheckEveryField(t, p, s.Compare) }},
		{"NothingChanged", func(t *testing.T) { CheckNothingChanged(t, p) }},
		{"FullSyncPeriod", func(t *testing.T) { CheckFullSyncPeriod(t, p) }},
		{"ChangesBeforeFullSync", func(t *testing.T) { CheckChangesBeforeFullSync(t, p) }},
		{"NoSyncBeforeSnapshot", func(t *testing.T) { CheckNoSyncBeforeSnapshot(t, p) }},
		{"SyncFailure", func(t *testing.T) { CheckSyncFailure(t, p) }},
		// What the kernel keeps besides the rules: conntrack, counters.
		{"ConntrackCleanup", func(t *testing.T) { CheckConntrackCleanup(t, p) }},
		{"ConntrackCleanupIPv6", func(t *testing.T) { CheckConntrackCleanupIPv6(t, p) }},
		{"Connections", func(t *testing.T) { CheckConnections(t, p) }},
	} {
		t.Run(c.name, c.check)
	}
}

// RunKernel asks path every question of the real-kernel checks both paths
// share, one subtest each, named after its check (Spread: KernelSpread).
// refusals are the path's own connections to refuse
// (KernelLocalAndReject). A path's tests call it once, as TestKernelShared.
func RunKernel(t *testing.T, path KernelPath, refusals ...Refusal) {
	for _, c := range []struct {
		name  string
		check func(t *testing.T, path KernelPath)
	}{
		{"Spread", KernelSpread},
		{"Topology", KernelTopology},
		{"Affinity", KernelAffinity},
		{"NodePort", KernelNodePort},
		{"LocalAndReject", func(t *testing.T, path KernelPath) { KernelLocalAndReject(t, path, refusals...) }},
		{"Hairpin", KernelHairpin},
		{"EstablishedSurvive", KernelEstablishedSurvive},
		{"RestartAndCleanup", KernelRestartAndCleanup},
		{"Connections", KernelConnections},
		// UDP conntrack: entries move when their endpoint leaves, also at a
		// new process's first sync and for a one-way sender whose endpoints
		// go to zero.
		{"UDPConntrack", func(t *testing.T, path KernelPath) { KernelUDPConntrack(t, path, service.IPv4) }},
		{"FirstSyncUDPConntrack", KernelFirstSyncUDPConntrack},
		{"UDPOneWayToZero", func(t *testing.T, path KernelPath) { KernelUDPOneWayToZero(t, path, service.IPv4) }},
		// externalIPs, LoadBalancer IPs and their source ranges, policy
		// Local with its health check.
		{"SourceRanges", KernelSourceRanges},
		{"SourceRangesSNATted", KernelSourceRangesSNATted},
		{"ExternalAndLoadBalancer", KernelExternalAndLoadBalancer},
		{"LocalWithHealthCheck", KernelLocalWithHealthCheck},
		// IPv6: a mode per family, and the IPv6 conntrack table.
		{"DualStack", KernelDualStack},
		{"UDPConntrackIPv6", func(t *testing.T, path KernelPath) { KernelUDPConntrack(t, path, service.IPv6) }},
		{"UDPOneWayToZeroIPv6", func(t *testing.T, path KernelPath) { KernelUDPOneWayToZero(t, path, service.IPv6) }},
	} {
		t.Run(c.name, func(t *testing.T) { c.check(t, path) })
	}
}
