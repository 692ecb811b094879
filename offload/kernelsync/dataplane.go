package kernelsync

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
)

// DataplaneConfig names a mode and its own metrics.
type DataplaneConfig struct {
	// Mode is the mode's name (dataplane.ModeIPTables): /proxyMode, errors,
	// and the metrics svcproxy_<mode>_syncs_total{kind="full"|"partial"}.
	Mode string
	// SyncsHelp is the help text of svcproxy_<mode>_syncs_total.
	SyncsHelp string
	// SizeMetric and SizeHelp name the gauge of Health.Size.
	SizeMetric, SizeHelp string
	// LagBound is the Syncer's (0: twice the Proxier's SyncPeriod).
	LagBound time.Duration
}

// Dataplane is a Proxier driven by the lifecycle every kernel mode shares
// (dataplane.Syncer): it is a dataplane.Interface but for Status, which the mode
// adds (with Connections, for hybrid's dataplane.KernelPath).
type Dataplane struct {
	*dataplane.Syncer
	health               func() Health
	syncs, size, repairs *prometheus.Desc
}

// NewDataplane drives p: each Snapshot the Syncer applies is p.Update, then p.Sync.
func NewDataplane[P Port, R Rendering[P]](p *Proxier[P, R], cfg DataplaneConfig) *Dataplane {
	return &Dataplane{
		Syncer: dataplane.NewSyncer(dataplane.SyncerConfig{
			Mode:     cfg.Mode,
			Apply:    func(ctx context.Context, snap *service.Snapshot) error { p.Update(snap); return p.Sync(ctx) },
			Period:   p.cfg.SyncPeriod,
			LagBound: cfg.LagBound,
			Now:      p.cfg.Now,
		}),
		health: p.Health,
		syncs:  prometheus.NewDesc("svcproxy_"+cfg.Mode+"_syncs_total", cfg.SyncsHelp, []string{"kind"}, nil),
		size:   prometheus.NewDesc(cfg.SizeMetric, cfg.SizeHelp, nil, nil),
		repairs: prometheus.NewDesc("svcproxy_"+cfg.Mode+"_repairs_total",
			"Full syncs forced because the periodic check found the kernel's rules not as svcproxy wrote them "+
				"(flushed or deleted by another program).", nil, nil),
	}
}

var (
	descConntrackDeleted = prometheus.NewDesc("svcproxy_conntrack_deleted_total",
		"Stale UDP conntrack entries deleted.", nil, nil)
	descConntrackErrors = prometheus.NewDesc("svcproxy_conntrack_errors_total",
		"Conntrack cleanups that failed.", nil, nil)
)

// Describe implements prometheus.Collector: the Syncer's metrics and the
// Proxier's Health.
func (d *Dataplane) Describe(ch chan<- *prometheus.Desc) {
	d.Syncer.Describe(ch)
	for _, desc := range []*prometheus.Desc{d.syncs, d.size, d.repairs, descConntrackDeleted, descConntrackErrors} {
		ch <- desc
	}
}

// Collect implements prometheus.Collector.
func (d *Dataplane) Collect(ch chan<- prometheus.Metric) {
	d.Syncer.Collect(ch)
	h := d.health()
	ch <- prometheus.MustNewConstMetric(d.syncs, prometheus.CounterValue, float64(h.FullSyncs), "full")
	ch <- prometheus.MustNewConstMetric(d.syncs, prometheus.CounterValue, float64(h.PartialSyncs), "partial")
	ch <- prometheus.MustNewConstMetric(d.size, prometheus.GaugeValue, float64(h.Size))
	ch <- prometheus.MustNewConstMetric(d.repairs, prometheus.CounterValue, float64(h.Repairs))
	ch <- prometheus.MustNewConstMetric(descConntrackDeleted, prometheus.CounterValue, float64(h.ConntrackDeleted))
	ch <- prometheus.MustNewConstMetric(descConntrackErrors, prometheus.CounterValue, float64(h.ConntrackErrors))
}
