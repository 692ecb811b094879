package userspace

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
)

// Dataplane is --mode userspace: a Proxier behind the dataplane interface.
// Its own Run retries what a Sync could not do; the Record says how far the
// listeners and portals lag the Snapshot.
type Dataplane struct {
	p      *Proxier
	record *dataplane.Record
}

var _ dataplane.Interface = (*Dataplane)(nil)

// New returns the userspace mode of cfg: a Proxier (NewProxier) that serves
// nothing until the first Sync.
func New(cfg Config) (*Dataplane, error) {
	if err := cfg.Node.Check(); err != nil {
		return nil, fmt.Errorf("userspace config: %w", err)
	}
	p := NewProxier(cfg)
	return &Dataplane{p: p, record: dataplane.NewRecord(dataplane.RecordConfig{Mode: dataplane.ModeUserspace, LagBound: cfg.LagBound, NodeName: p.cfg.NodeName})}, nil
}

// Proxier is the mode's Proxier (for tests and tools that look at its
// listeners).
func (d *Dataplane) Proxier() *Proxier { return d.p }

// Mode implements dataplane.Interface.
func (d *Dataplane) Mode() string { return dataplane.ModeUserspace }

// Sync implements dataplane.Interface.
func (d *Dataplane) Sync(_ context.Context, snap *service.Snapshot) error {
	d.record.Queued()
	a := d.record.Begin(snap)
	err := d.p.Sync(snap)
	// The Proxier serves every port it could and its Run retries the rest,
	// so the record only tracks that snap was taken up; what failed shows in
	// LastError (portals) and Status (listeners) until the retry succeeds.
	d.record.End(a, nil)
	return err
}

// Run implements dataplane.Interface: the Proxier's Run, which shuts it down
// (see Proxier.Shutdown) when ctx ends.
func (d *Dataplane) Run(ctx context.Context) error { return d.p.Run(ctx) }

// Healthy implements dataplane.Interface. A port whose listener could not be
// bound is reported in Status, not here: the others are served.
func (d *Dataplane) Healthy() error {
	if err := d.p.LastError(); err != nil {
		return fmt.Errorf("portals: %w", err)
	}
	if err := d.record.Healthy(); err != nil {
		return fmt.Errorf("userspace: %w", err)
	}
	return nil
}

// Lag implements dataplane.Interface: the Record's (the Proxier takes up each
// Snapshot at once, so it lags only while a Sync runs past the bound).
func (d *Dataplane) Lag() error {
	if err := d.record.Lag(); err != nil {
		return fmt.Errorf("userspace: %w", err)
	}
	return nil
}

// Status implements dataplane.Interface.
func (d *Dataplane) Status() any {
	return map[string]any{"mode": dataplane.ModeUserspace, "userspace": d.p.Status()}
}

// Describe implements prometheus.Collector.
func (d *Dataplane) Describe(ch chan<- *prometheus.Desc) {
	d.record.Describe(ch)
	PortCollector(d.p).Describe(ch)
}

// Collect implements prometheus.Collector.
func (d *Dataplane) Collect(ch chan<- prometheus.Metric) {
	d.record.Collect(ch)
	PortCollector(d.p).Collect(ch)
}

// PortCollector returns the per-port counters of p (Stats) as metrics, each
// labelled service_port: for --mode userspace and for hybrid's userspace side.
func PortCollector(p *Proxier) prometheus.Collector { return portCollector{p} }

type portCollector struct{ p *Proxier }

var portMetrics = []struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(Counters) uint64
}{
	{portDesc("svcproxy_userspace_connections_total", "Connections (TCP) or sessions (UDP) accepted."),
		prometheus.CounterValue, func(c Counters) uint64 { return c.ConnectionsOpened }},
	{portDesc("svcproxy_userspace_connections_active", "Connections or sessions open now."),
		prometheus.GaugeValue, func(c Counters) uint64 { return c.ConnectionsActive }},
	{portDesc("svcproxy_userspace_bytes_from_clients_total", "Bytes copied from clients to endpoints."),
		prometheus.CounterValue, func(c Counters) uint64 { return c.BytesFromClients }},
	{portDesc("svcproxy_userspace_bytes_to_clients_total", "Bytes copied from endpoints to clients."),
		prometheus.CounterValue, func(c Counters) uint64 { return c.BytesToClients }},
	{portDesc("svcproxy_userspace_dial_failures_total", "Failed attempts to reach an endpoint."),
		prometheus.CounterValue, func(c Counters) uint64 { return c.DialFailures }},
}

func portDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"service_port"}, nil)
}

var fdExhaustedDesc = prometheus.NewDesc("svcproxy_userspace_fd_exhausted_total",
	"Connections and UDP sessions refused, and socket calls failed, for lack of file descriptors.", nil, nil)

func (c portCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range portMetrics {
		ch <- m.desc
	}
	ch <- fdExhaustedDesc
}

func (c portCollector) Collect(ch chan<- prometheus.Metric) {
	for name, counters := range c.p.Stats() {
		for _, m := range portMetrics {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, float64(m.value(counters)), name.String())
		}
	}
	ch <- prometheus.MustNewConstMetric(fdExhaustedDesc, prometheus.CounterValue, float64(c.p.FDExhausted()))
}
