package nftables

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
		// kube-proxy's name (pkg/proxy/metrics); a sync fails when its nft
		// transaction does.
		FailuresMetric: "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
		FailuresHelp:   "Cumulative proxy nftables sync failures",
		LagBound:       lagBound,
		NodeName:       cfg.Rules.NodeName,
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

// localhostRejectedDesc is kube-proxy's metric of the packets its table
// rejects on localhost NodePorts (pkg/proxy/metrics:
// localhostNodePortRejectedPacketsDescription); dataplane.Families adds the
// label ip_family.
var localhostRejectedDesc = prometheus.NewDesc("kubeproxy_nftables_localhost_nodeport_rejected_packets_total",
	"Number of packets rejected on localhost NodePorts: UDP and SCTP, which the localhost listeners do not serve.",
	[]string{"protocol"}, nil)

// Describe implements prometheus.Collector: the sync record's metrics, and
// with Config.LocalhostNodePorts the localhost rejections.
func (d *Dataplane) Describe(ch chan<- *prometheus.Desc) {
	d.Dataplane.Describe(ch)
	if d.p.t.cfg.Rules.LocalhostNodePorts {
		ch <- localhostRejectedDesc
	}
}

// Collect implements prometheus.Collector. The rejections are read from the
// kernel at each scrape, bounded as kube-proxy bounds it (2s); a failed read
// leaves them out of that scrape.
func (d *Dataplane) Collect(ch chan<- prometheus.Metric) {
	d.Dataplane.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rejected, err := d.p.LocalhostRejected(ctx)
	if err != nil {
		return
	}
	for _, proto := range localhostRejected {
		if n, ok := rejected[proto]; ok {
			ch <- prometheus.MustNewConstMetric(localhostRejectedDesc, prometheus.CounterValue, float64(n), strings.ToUpper(proto))
		}
	}
}
