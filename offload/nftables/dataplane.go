package nftables

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
)

// Dataplane is --mode nftables, and hybrid mode's nftables path: a Proxier driven
// by the lifecycle every kernel mode shares (dataplane.Syncer). When its context
// ends the table stays: traffic keeps flowing while svcproxy restarts, and the next
// process adopts it at its first sync.
type Dataplane struct {
	p *Proxier
	*dataplane.Syncer
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
	d := &Dataplane{p: p}
	d.Syncer = dataplane.NewSyncer(dataplane.SyncerConfig{
		Mode:     dataplane.ModeNFTables,
		Apply:    func(ctx context.Context, snap *service.Snapshot) error { p.Update(snap); return p.Sync(ctx) },
		Period:   p.cfg.SyncPeriod,
		LagBound: lagBound,
		Now:      cfg.Now,
	})
	return d, nil
}

// Mode implements dataplane.Interface.
func (d *Dataplane) Mode() string { return dataplane.ModeNFTables }

// Healthy implements dataplane.Interface.
func (d *Dataplane) Healthy() error {
	if err := d.Syncer.Healthy(); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return nil
}

// Status implements dataplane.Interface: the sync record and each port's chains
// and endpoint shares.
func (d *Dataplane) Status() any {
	return map[string]any{"mode": dataplane.ModeNFTables, "table": "ip " + Table, "health": d.p.Health(), "ports": d.p.Status()}
}

// Connections implements dataplane.KernelPath (see Proxier.Connections).
func (d *Dataplane) Connections(ctx context.Context, _ *service.Snapshot, ports dataplane.PortSet) (map[service.PortName]uint64, error) {
	return d.p.Connections(ctx, ports)
}

var (
	descSyncs = prometheus.NewDesc("svcproxy_nftables_syncs_total",
		"Successful nftables syncs, by kind: full (the whole table written) or partial (only the changed ports' objects).", []string{"kind"}, nil)
	descOperations = prometheus.NewDesc("svcproxy_nftables_transaction_operations",
		"Commands in the last nft transaction.", nil, nil)
	descConntrackDeleted = prometheus.NewDesc("svcproxy_conntrack_deleted_total",
		"Stale UDP conntrack entries deleted.", nil, nil)
	descConntrackErrors = prometheus.NewDesc("svcproxy_conntrack_errors_total",
		"Conntrack cleanups that failed.", nil, nil)
)

// Describe implements prometheus.Collector.
func (d *Dataplane) Describe(ch chan<- *prometheus.Desc) {
	d.Syncer.Describe(ch)
	for _, desc := range []*prometheus.Desc{descSyncs, descOperations, descConntrackDeleted, descConntrackErrors} {
		ch <- desc
	}
}

// Collect implements prometheus.Collector.
func (d *Dataplane) Collect(ch chan<- prometheus.Metric) {
	d.Syncer.Collect(ch)
	h := d.p.Health()
	ch <- prometheus.MustNewConstMetric(descSyncs, prometheus.CounterValue, float64(h.FullSyncs), "full")
	ch <- prometheus.MustNewConstMetric(descSyncs, prometheus.CounterValue, float64(h.PartialSyncs), "partial")
	ch <- prometheus.MustNewConstMetric(descOperations, prometheus.GaugeValue, float64(h.Operations))
	ch <- prometheus.MustNewConstMetric(descConntrackDeleted, prometheus.CounterValue, float64(h.ConntrackDeleted))
	ch <- prometheus.MustNewConstMetric(descConntrackErrors, prometheus.CounterValue, float64(h.ConntrackErrors))
}
