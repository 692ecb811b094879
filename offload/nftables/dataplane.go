package nftables

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
)

// Dataplane is --mode nftables, and hybrid mode's nftables path. It keeps the
// table in step with the latest Snapshot (sync, sync.go), driven by the
// lifecycle every kernel mode shares (dataplane.Syncer: one sync at a time,
// retries, resyncs). How a sync goes (full or partial, what was applied, the
// health record, stale UDP flows) is its kernelsync.Ledger's, shared with
// iptables mode; what is nftables' own is the ruleset rendered from the
// Snapshot and written in one nft transaction. When its context ends the
// table stays: traffic keeps flowing while svcproxy restarts, and the next
// process adopts it at its first sync.
type Dataplane struct {
	kernelsync.Dataplane[*portObjects] // the Syncer, the Ledger, their metrics
	cfg                                Config
	clusterIPs                         []string // the cluster-ips set as last applied; the syncs' (the Ledger holds them)

	mu    sync.Mutex     // guards ports
	ports []*portObjects // as last applied; each is immutable
}

var _ dataplane.KernelPath = (*Dataplane)(nil)

// Health is the sync record, for /status and /metrics.
type Health struct {
	kernelsync.Health
	// Operations is the number of nft commands in the last transaction.
	Operations int `json:"operations"`
}

// New checks cfg and returns nftables mode, which syncs nothing before its
// first Snapshot (a restart must not replace the table of the last process
// with an empty one while the sources are still listing). cfg.Carries
// restricts it to some ports (hybrid's promoted ones; set
// cfg.CountConnections too, so that Connections has counters to read).
func New(cfg Config) (*Dataplane, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	d := &Dataplane{cfg: cfg}
	d.Dataplane = kernelsync.NewDataplane[*portObjects](dataplane.ModeNFTables, kernelsync.Metrics{
		SyncsHelp:  "Successful nftables syncs, by kind: full (the whole table written) or partial (only the changed ports' objects).",
		SizeMetric: "svcproxy_nftables_transaction_operations",
		SizeHelp:   "Commands in the last nft transaction.",
		// kube-proxy's name (pkg/proxy/metrics); a sync fails when its nft
		// transaction does.
		FailuresMetric: "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
		FailuresHelp:   "Cumulative proxy nftables sync failures",
	}, cfg.Periods, cfg.NodeName, d.sync)
	return d, nil
}

// Health returns the sync record.
func (d *Dataplane) Health() Health {
	h := d.Ledger.Health()
	return Health{Health: h, Operations: h.Size}
}

// Ports returns the service ports as last applied: chains and endpoint shares.
// It is built when asked for, not at every sync: a sync at 10,000 ports that
// changes one should not copy 10,000 statuses.
func (d *Dataplane) Ports() []PortStatus {
	d.mu.Lock()
	ports := d.ports
	d.mu.Unlock()
	out := make([]PortStatus, len(ports))
	for i, po := range ports {
		out[i] = po.status
	}
	return out
}

// Status implements dataplane.Interface: the sync record and each port's chains
// and endpoint shares.
func (d *Dataplane) Status() any {
	return map[string]any{"mode": dataplane.ModeNFTables, "table": string(TableFamily(d.cfg.Family)) + " " + Table, "health": d.Health(), "ports": d.Ports()}
}

// localhostRejectedDesc is kube-proxy's metric of the packets its table
// rejects on localhost NodePorts (pkg/proxy/metrics:
// localhostNodePortRejectedPacketsDescription); dataplane.Families adds the
// label ip_family.
var localhostRejectedDesc = prometheus.NewDesc("kubeproxy_nftables_localhost_nodeport_rejected_packets_total",
	"Number of packets rejected on localhost NodePorts: UDP and SCTP, which the localhost listeners do not serve.",
	[]string{"protocol"}, nil)

// Describe implements prometheus.Collector: the Syncer's record, the
// Ledger's sync metrics, and with Config.LocalhostNodePorts the localhost
// rejections.
func (d *Dataplane) Describe(ch chan<- *prometheus.Desc) {
	d.Dataplane.Describe(ch)
	if d.cfg.LocalhostNodePorts {
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
	rejected, err := d.LocalhostRejected(ctx)
	if err != nil {
		return
	}
	for _, proto := range localhostRejected {
		if n, ok := rejected[proto]; ok {
			ch <- prometheus.MustNewConstMetric(localhostRejectedDesc, prometheus.CounterValue, float64(n), strings.ToUpper(proto))
		}
	}
}
