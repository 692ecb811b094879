package iptables

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// Dataplane is --mode iptables, and hybrid mode's iptables path. It keeps the
// kernel's rules in step with the latest Snapshot (sync, sync.go), driven by
// the lifecycle every kernel mode shares (dataplane.Syncer: one sync at a
// time, retries, resyncs). How a sync goes (full or partial, what was applied,
// the health record, stale UDP flows) is its kernelsync.Ledger's, shared with
// nftables mode; what is iptables' own is the rendering, iptables-restore text,
// and writing it in one restore. When its context ends the rules stay:
// traffic keeps flowing while svcproxy restarts, and the next process adopts
// them at its first sync.
type Dataplane struct {
	kernelsync.Dataplane[*portRules] // the Syncer, the Ledger, their metrics
	cfg                              Config

	// The syncs' (the ledger holds them): the top chains as last applied,
	// and per port the DNAT packets of its chains that a sync rewrote or
	// deleted (CountConnections).
	top     map[string]map[string][]byte
	carried map[service.PortName]uint64
	// endpoints of the ports of the latest Snapshot this path writes: the
	// size that makes a cluster large (largeClusterEndpoints).
	endpoints atomic.Int64

	mu     sync.Mutex // guards status
	status []PortStatus
}

// largeClusterEndpoints is kube-proxy's largeClusterEndpointsThreshold:
// above it no periodic full sync (kernelsync.Config.LargeCluster).
const largeClusterEndpoints = 1000

var _ dataplane.KernelPath = (*Dataplane)(nil)

// Health is the sync record, for /status and /metrics.
type Health struct {
	kernelsync.Health
	// RestoreBytes is the size of the last restore text.
	RestoreBytes int `json:"restoreBytes"`
}

// New checks cfg and returns iptables mode, which syncs nothing before its
// first Snapshot (a restart must not replace the rules of the last process
// with an empty set while the sources are still listing). cfg.Carries
// restricts it to some ports (hybrid's promoted ones).
func New(cfg Config) (*Dataplane, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	d := &Dataplane{cfg: cfg, carried: map[service.PortName]uint64{}}
	d.Dataplane = kernelsync.NewDataplane[*portRules](dataplane.ModeIPTables, kernelsync.Metrics{
		SyncsHelp:  "Successful iptables syncs, by kind: full (every chain rewritten) or partial (only the changed ports').",
		SizeMetric: "svcproxy_iptables_restore_bytes",
		SizeHelp:   "Size of the last iptables-restore input.",
		// kube-proxy's names (pkg/proxy/metrics); a sync fails when its
		// iptables-restore does.
		FailuresMetric:        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
		FailuresHelp:          "Cumulative proxy iptables restore failures",
		PartialFailuresMetric: "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
		PartialFailuresHelp:   "Cumulative proxy iptables partial restore failures (each followed by a full restore)",
	}, cfg.Periods, cfg.NodeName, d.sync)
	d.Ledger.SkipPeriodicFullSyncs(func() bool { return d.endpoints.Load() > largeClusterEndpoints })
	return d, nil
}

// Health returns the sync record.
func (d *Dataplane) Health() Health {
	h := d.Ledger.Health()
	return Health{Health: h, RestoreBytes: h.Size}
}

// Ports returns the service ports as last applied: chains and endpoint shares.
func (d *Dataplane) Ports() []PortStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.status)
}

// Status implements dataplane.Interface: the sync record and each port's
// chains and endpoint shares.
func (d *Dataplane) Status() any {
	return map[string]any{"mode": dataplane.ModeIPTables, "health": d.Health(), "ports": d.Ports()}
}
