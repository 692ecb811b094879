package socklb

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/service"
)

// Counter is a kernel side that counts, per Service, the connect()s (UDP: the
// flows) its hooks translated. Hybrid mode reads it to tell a promoted port's
// rate; a kernel side without it leaves only the nftables path's counters.
type Counter interface {
	Connections(ctx context.Context) (map[ksocklb.Service]uint64, error)
}

// Dataplane is --mode socklb, and hybrid mode's socklb path: the hooks' maps
// (Maps) and, beside them, a kernel path for everything else. Each
// Snapshot goes to the path beside first, then to the maps: a port that
// loses its last endpoint is rejected there before its element stops
// rewriting connect(), and a port that gains one is DNATed there before the
// element starts.
//
// The maps have a lifecycle of their own (dataplane.Syncer: retries with
// backoff, a resync every SyncPeriod); kube-proxy's sync metrics come from
// the path beside (kubeproxy_sync_proxy_rules_*), the maps' from
// svcproxy_socklb_*. When Run's context ends both stay: the table, and the
// maps and programs as kernel/socklb leaves them (pinned, or detached with
// the process), so connections keep flowing while svcproxy restarts.
type Dataplane struct {
	m      *Maps
	beside dataplane.KernelPath
	maps   *dataplane.Syncer
}

var _ dataplane.KernelPath = (*Dataplane)(nil)

// New returns the socklb mode of cfg.
func New(cfg Config) (*Dataplane, error) {
	if cfg.Beside == nil {
		return nil, errors.New("socklb dataplane: Beside is nil: the hooks see only local sockets")
	}
	m, err := NewMaps(cfg)
	if err != nil {
		return nil, err
	}
	return &Dataplane{m: m, beside: cfg.Beside, maps: dataplane.NewSyncer(dataplane.SyncerConfig{
		Mode:     dataplane.ModeSocketLB,
		Apply:    m.Sync,
		Period:   cfg.SyncPeriod,
		LagBound: cfg.LagBound,
		NodeName: cfg.NodeName,
		Now:      cfg.Now,
	})}, nil
}

// Mode implements dataplane.Interface.
func (d *Dataplane) Mode() string { return dataplane.ModeSocketLB }

// Maps is the mode's maps (for tests and tools).
func (d *Dataplane) Maps() *Maps { return d.m }

// Sync implements dataplane.Interface: the path beside, then the maps. A
// failure of one does not keep the other from syncing.
func (d *Dataplane) Sync(ctx context.Context, snap *service.Snapshot) error {
	errB := d.beside.Sync(ctx, snap)
	if errB != nil {
		errB = fmt.Errorf("%s beside: %w", d.beside.Mode(), errB)
	}
	return errors.Join(errB, d.maps.Sync(ctx, snap))
}

// Run implements dataplane.Interface: both lifecycles, until ctx ends.
func (d *Dataplane) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	var errB, errM error
	wg.Go(func() { errB = d.beside.Run(ctx) })
	wg.Go(func() { errM = d.maps.Run(ctx) })
	wg.Wait()
	return errors.Join(errB, errM)
}

// Healthy implements dataplane.Interface: both must be.
func (d *Dataplane) Healthy() error { return errors.Join(d.beside.Healthy(), d.maps.Healthy()) }

// Lag implements dataplane.Interface: neither may lag.
func (d *Dataplane) Lag() error { return errors.Join(d.beside.Lag(), d.maps.Lag()) }

// Status implements dataplane.Interface: the maps' ports and sync record,
// the hooks' translations per port when the kernel side counts them
// (service port -> count; an error's text when they cannot be read), and
// the path beside's own document under its mode's name.
func (d *Dataplane) Status() any {
	maps := map[string]any{"health": d.m.Health(), "ports": d.m.Status()}
	translated, counted, err := d.translated(context.Background(), nil)
	switch {
	case err != nil:
		maps["connections"] = err.Error()
	case counted:
		byName := make(map[string]uint64, len(translated))
		for name, n := range translated {
			byName[name.String()] = n
		}
		maps["connections"] = byName
	}
	return map[string]any{
		"mode":          dataplane.ModeSocketLB,
		"maps":          maps,
		d.beside.Mode(): d.beside.Status(),
	}
}

// Connections implements dataplane.KernelPath: a port's connections on the
// path beside, plus those the hooks translated, when the kernel side counts
// them (Counter). When it does not, a port the maps carry is left out of the
// answer: its connections from the cgroup are invisible, and the path
// beside's count alone would make a busy port look quiet. Hybrid mode then
// keeps such a port where it is (a port missing from a sample is not
// demoted, hybrid.Promoter.Observe).
func (d *Dataplane) Connections(ctx context.Context, snap *service.Snapshot, ports dataplane.PortSet) (map[service.PortName]uint64, error) {
	out, err := d.beside.Connections(ctx, snap, ports)
	if err != nil {
		return nil, err
	}
	translated, counted, err := d.translated(ctx, ports)
	if err != nil {
		return nil, err
	}
	if !counted {
		for name := range translated {
			delete(out, name)
		}
		return out, nil
	}
	if out == nil {
		out = map[service.PortName]uint64{}
	}
	for name, n := range translated {
		out[name] += n
	}
	return out, nil
}

// translated returns, for each port in names the maps carry (nil names:
// every one), how many connect()s and unconnected UDP datagrams the hooks
// translated to it, summed over its ClusterIPs' elements; counted is false
// (and every count 0) when the kernel side does not count (no Counter).
// A port's count starts from 0 each time it goes into the maps (hybrid
// promotes it again; its elements get new IDs), as the path beside's
// counters do when its rules come back.
func (d *Dataplane) translated(ctx context.Context, names dataplane.PortSet) (_ map[service.PortName]uint64, counted bool, _ error) {
	frontends := d.m.Frontends(names)
	out := make(map[service.PortName]uint64, len(frontends))
	for name := range frontends {
		out[name] = 0
	}
	c, ok := d.m.cfg.LB.(Counter)
	if !ok {
		return out, false, nil
	}
	counts, err := c.Connections(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("socklb: read the connection counters: %w", err)
	}
	for name, fs := range frontends {
		for _, f := range fs {
			out[name] += counts[f]
		}
	}
	return out, true, nil
}

var (
	descSyncs = prometheus.NewDesc("svcproxy_socklb_syncs_total",
		"Syncs of the socket-LB maps, by result: ok or failed (each failure is retried with backoff).", []string{"result"}, nil)
	descChecks = prometheus.NewDesc("svcproxy_socklb_checks_total",
		"Syncs of the socket-LB maps that read the maps back first (the first, after a failure, and once per check period).", nil, nil)
	descRepairs = prometheus.NewDesc("svcproxy_socklb_repairs_total",
		"Checks that found the socket-LB maps other than svcproxy left them (another program changed them).", nil, nil)
	descUpdates = prometheus.NewDesc("svcproxy_socklb_element_updates_total",
		"Socket-LB map elements written, by operation: set (a Service added or changed) or delete.", []string{"op"}, nil)
	descElements = prometheus.NewDesc("svcproxy_socklb_services",
		"Services (VIP, port, protocol) in the socket-LB maps after the last sync.", nil, nil)
	descPortBackends = prometheus.NewDesc("svcproxy_socklb_port_backends",
		"Backends a connect() to each service port's ClusterIPs is spread over by the socket-LB hooks (0: left to the nftables path, which rejects it).",
		[]string{"service_port"}, nil)
	descPortConnections = prometheus.NewDesc("svcproxy_socklb_port_connections_total",
		"connect()s (and datagrams of unconnected UDP sockets) the socket-LB hooks translated to each service port's backends, since the port went into the maps.",
		[]string{"service_port"}, nil)
)

// Describe implements prometheus.Collector: the path beside's metrics and
// the maps'.
func (d *Dataplane) Describe(ch chan<- *prometheus.Desc) {
	d.beside.Describe(ch)
	for _, desc := range []*prometheus.Desc{descSyncs, descChecks, descRepairs, descUpdates, descElements, descPortBackends, descPortConnections} {
		ch <- desc
	}
	d.m.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (d *Dataplane) Collect(ch chan<- prometheus.Metric) {
	d.beside.Collect(ch)
	h := d.m.Health()
	ch <- prometheus.MustNewConstMetric(descSyncs, prometheus.CounterValue, float64(h.Syncs-h.Failures), "ok")
	ch <- prometheus.MustNewConstMetric(descSyncs, prometheus.CounterValue, float64(h.Failures), "failed")
	ch <- prometheus.MustNewConstMetric(descChecks, prometheus.CounterValue, float64(h.Checks))
	ch <- prometheus.MustNewConstMetric(descRepairs, prometheus.CounterValue, float64(h.Repairs))
	ch <- prometheus.MustNewConstMetric(descUpdates, prometheus.CounterValue, float64(h.Sets), "set")
	ch <- prometheus.MustNewConstMetric(descUpdates, prometheus.CounterValue, float64(h.Deletes), "delete")
	ch <- prometheus.MustNewConstMetric(descElements, prometheus.GaugeValue, float64(h.Elements))
	for _, ps := range d.m.Status() {
		ch <- prometheus.MustNewConstMetric(descPortBackends, prometheus.GaugeValue, float64(len(ps.Backends)), ps.Port)
	}
	// A kernel side that does not count has no such series; one whose
	// counters cannot be read now has none this scrape (Status says why).
	if translated, counted, err := d.translated(context.Background(), nil); err == nil && counted {
		for name, n := range translated {
			ch <- prometheus.MustNewConstMetric(descPortConnections, prometheus.CounterValue, float64(n), name.String())
		}
	}
	d.m.duration.Collect(ch)
}
