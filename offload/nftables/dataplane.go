package nftables

import (
	"context"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// Dataplane is --mode nftables, and hybrid mode's nftables path: a Proxier driven
// by the lifecycle every kernel mode shares (kernelsync.Dataplane, over
// dataplane.Syncer). When its context ends the table stays: traffic keeps flowing
// while svcproxy restarts, and the next process adopts it at its first sync.
type Dataplane struct {
	p *Proxier
	*kernelsync.Dataplane
}

var _ dataplane.KernelPath = (*Dataplane)(nil)

// NewDataplane returns the nftables mode of cfg. cfg.Rules.Include restricts it to
// some ports (hybrid's promoted ones; set cfg.Rules.CountConnections too, so that
// Connections has counters to read); lagBound is the Syncer's (0: twice
// cfg.SyncPeriod).
func NewDataplane(cfg ProxierConfig, lagBound time.Duration) (*Dataplane, error) {
	p, err := NewProxier(cfg)
	if err != nil {
		return nil, err
	}
	return &Dataplane{p: p, Dataplane: kernelsync.NewDataplane(p.sync, kernelsync.DataplaneConfig{
		Mode:       dataplane.ModeNFTables,
		SyncsHelp:  "Successful nftables syncs, by kind: full (the whole table written) or partial (only the changed ports' objects).",
		SizeMetric: "svcproxy_nftables_transaction_operations",
		SizeHelp:   "Commands in the last nft transaction.",
		LagBound:   lagBound,
	})}, nil
}

// Status implements dataplane.Interface: the sync record and each port's chains
// and endpoint shares.
func (d *Dataplane) Status() any {
	return map[string]any{"mode": dataplane.ModeNFTables, "table": string(TableFamily(d.p.t.cfg.Rules.Family)) + " " + Table, "health": d.p.Health(), "ports": d.p.Status()}
}

// Connections implements dataplane.KernelPath (see Proxier.Connections).
func (d *Dataplane) Connections(ctx context.Context, _ *service.Snapshot, ports dataplane.PortSet) (map[service.PortName]uint64, error) {
	return d.p.Connections(ctx, ports)
}
