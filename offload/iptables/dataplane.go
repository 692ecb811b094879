package iptables

import (
	"context"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// Dataplane is --mode iptables, and hybrid mode's iptables path: a Proxier
// driven by the lifecycle every kernel mode shares (kernelsync.Dataplane, over
// dataplane.Syncer). When its context ends the rules stay: traffic keeps
// flowing while svcproxy restarts, and the next process adopts them at its
// first sync.
type Dataplane struct {
	p *Proxier
	*kernelsync.Dataplane
}

var _ dataplane.KernelPath = (*Dataplane)(nil)

// NewDataplane returns the iptables mode of cfg. cfg.Rules.Include restricts it
// to some ports (hybrid's promoted ones); lagBound is the Syncer's (0: twice
// cfg.SyncPeriod).
func NewDataplane(cfg ProxierConfig, lagBound time.Duration) (*Dataplane, error) {
	p, err := NewProxier(cfg)
	if err != nil {
		return nil, err
	}
	return &Dataplane{p: p, Dataplane: kernelsync.NewDataplane(p.sync, kernelsync.DataplaneConfig{
		Mode:       dataplane.ModeIPTables,
		SyncsHelp:  "Successful iptables syncs, by kind: full (every chain rewritten) or partial (only the changed ports').",
		SizeMetric: "svcproxy_iptables_restore_bytes",
		SizeHelp:   "Size of the last iptables-restore input.",
		// kube-proxy's names (pkg/proxy/metrics); a sync fails when its
		// iptables-restore does.
		FailuresMetric:        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
		FailuresHelp:          "Cumulative proxy iptables restore failures",
		PartialFailuresMetric: "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
		PartialFailuresHelp:   "Cumulative proxy iptables partial restore failures (each followed by a full restore)",
		LagBound:              lagBound,
		NodeName:              cfg.Rules.NodeName,
	})}, nil
}

// Status implements dataplane.Interface: the sync record and each port's
// chains and endpoint shares.
func (d *Dataplane) Status() any {
	return map[string]any{"mode": dataplane.ModeIPTables, "health": d.p.Health(), "ports": d.p.Status()}
}

// Connections implements dataplane.KernelPath (see Proxier.Connections).
func (d *Dataplane) Connections(ctx context.Context, _ *service.Snapshot, ports dataplane.PortSet) (map[service.PortName]uint64, error) {
	return d.p.Connections(ctx, ports)
}
