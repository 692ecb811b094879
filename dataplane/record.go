package dataplane

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/service"
)

// DefaultLagBound is how long a Snapshot may wait to be applied before
// /healthz fails, when RecordConfig gives none: kube-proxy's healthTimeout is
// twice its --sync-period (30s).
const DefaultLagBound = 60 * time.Second

// RecordConfig configures a Record.
type RecordConfig struct {
	// Mode labels the svcproxy_ metrics ("iptables").
	Mode string
	// LagBound is how long the latest Snapshot may wait to be applied before
	// Healthy fails. If zero, DefaultLagBound.
	LagBound time.Duration
	// NodeName is this node: its endpoints are the local ones that
	// kubeproxy_sync_proxy_rules_no_local_endpoints_total looks for.
	NodeName string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Record is a mode's sync record: when the latest Snapshot was handed over,
// when the rules last matched one, and whether the last sync failed. It
// answers Healthy as kube-proxy's healthz does: a mode is healthy once it has
// applied a Snapshot, while its last sync succeeded, and while no Snapshot has
// waited longer than the bound; so /healthz reports what is applied, not what
// was handed over. It is also a prometheus.Collector of kube-proxy's sync
// metrics. Safe for concurrent use.
type Record struct {
	cfg RecordConfig

	mu       sync.Mutex
	pending  time.Time // when the oldest Snapshot not yet applied was handed over; zero: none
	inFlight time.Time // pending's value taken by the sync running now
	synced   bool      // a sync has succeeded
	lastErr  error
	inARow   int
	started  time.Time            // triggers before it are not this process's to measure
	triggers map[string]time.Time // per service/slice, the trigger time the last applied Snapshot had

	duration    prometheus.Histogram
	programming prometheus.Histogram // from the slices' trigger times
	applied     prometheus.Histogram // from the handover
	last        prometheus.Gauge
	queued      prometheus.Gauge
	failures    prometheus.Counter
	syncs       prometheus.Counter
	noLocal     *prometheus.GaugeVec
}

// NewRecord returns a Record that has seen no Snapshot.
func NewRecord(cfg RecordConfig) *Record {
	if cfg.LagBound <= 0 {
		cfg.LagBound = DefaultLagBound
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	mode := prometheus.Labels{"mode": cfg.Mode}
	return &Record{
		cfg: cfg, started: cfg.Now(), triggers: map[string]time.Time{},
		// kube-proxy's names and buckets (pkg/proxy/metrics).
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubeproxy_sync_proxy_rules_duration_seconds",
			Help:    "SyncProxyRules latency in seconds: how long one sync of the rules took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		programming: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kubeproxy_network_programming_duration_seconds",
			Help: "In Cluster Network Programming Latency in seconds: from an EndpointSlice's " +
				"endpoints.kubernetes.io/last-change-trigger-time to the end of the sync that applied it.",
			Buckets: programmingBuckets,
		}),
		applied: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "svcproxy_snapshot_programming_duration_seconds",
			Help:    "From the moment svcproxy was handed a Snapshot to the end of the sync that applied it; one sample per sync that applied a handed-over Snapshot.",
			Buckets: programmingBuckets, ConstLabels: mode,
		}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
			Help: "The last time the rules were successfully synced (unix seconds).",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
			Help: "The last time a Snapshot was handed over to be synced (unix seconds).",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcproxy_sync_failures_total", Help: "Syncs that failed (each is retried with backoff).", ConstLabels: mode,
		}),
		syncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcproxy_syncs_total", Help: "Syncs that succeeded.", ConstLabels: mode,
		}),
		noLocal: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
			Help: "Number of services with a Local traffic policy and no endpoints",
		}, []string{"traffic_policy"}),
	}
}

// programmingBuckets are kube-proxy's NetworkProgrammingLatency buckets.
var programmingBuckets = merge(prometheus.LinearBuckets(0.25, 0.25, 2), prometheus.LinearBuckets(1, 1, 59),
	prometheus.LinearBuckets(60, 5, 12), prometheus.LinearBuckets(120, 30, 7))

func merge(parts ...[]float64) []float64 {
	var out []float64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Queued records that a Snapshot was handed over to be synced.
func (r *Record) Queued() {
	now := r.cfg.Now()
	r.queued.Set(float64(now.UnixNano()) / 1e9)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending.IsZero() {
		r.pending = now
	}
}

// Attempt is one sync, from Begin to End.
type Attempt struct {
	start, queued time.Time
	snap          *service.Snapshot
	programmed    bool // Programmed observed snap's latencies before End
}

// Begin records that a sync of snap starts, taking over what is pending: the
// sync applies the latest Snapshot, which covers every one handed over before.
func (r *Record) Begin(snap *service.Snapshot) Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := Attempt{start: r.cfg.Now(), queued: r.pending, snap: snap}
	r.inFlight, r.pending = r.pending, time.Time{}
	return a
}

// End records how the sync a began ended.
func (r *Record) End(a Attempt, err error) {
	end := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight = time.Time{}
	if err != nil {
		r.lastErr = err
		r.inARow++
		r.failures.Inc()
		if !a.queued.IsZero() && (r.pending.IsZero() || a.queued.Before(r.pending)) {
			r.pending = a.queued // still not applied
		}
		return
	}
	r.synced, r.lastErr, r.inARow = true, nil, 0
	r.syncs.Inc()
	r.duration.Observe(end.Sub(a.start).Seconds())
	r.last.Set(float64(end.UnixNano()) / 1e9)
	if !a.programmed {
		r.observeProgrammed(a, end)
	}
	if a.snap != nil {
		internal, external := NoLocalEndpoints(a.snap, r.cfg.NodeName)
		r.noLocal.WithLabelValues("internal").Set(float64(internal))
		r.noLocal.WithLabelValues("external").Set(float64(external))
	}
}

// Programmed records that the kernel carries a's Snapshot now, before the
// sync ends: its programming latencies (kubeproxy_network_programming_duration_seconds,
// svcproxy_snapshot_programming_duration_seconds) end here, and End, which
// still records the sync's duration and outcome, does not observe them again.
// A periodic full sync that wrote its changes first calls it between the two
// writes (offload/kernelsync).
func (r *Record) Programmed(a *Attempt) {
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observeProgrammed(*a, now)
	a.programmed = true
}

// observeProgrammed observes a's latencies as of end: from the handover and
// from each EndpointSlice change's trigger.
func (r *Record) observeProgrammed(a Attempt, end time.Time) {
	if !a.queued.IsZero() {
		r.applied.Observe(end.Sub(a.queued).Seconds())
	}
	if a.snap != nil {
		r.observeTriggers(a.snap, end)
	}
}

// observeTriggers observes, for each EndpointSlice change snap applied, the
// time from its trigger to end: kube-proxy observes the trigger times of the
// slice updates a sync checked out (EndpointsChangeTracker), each once, and
// none from before the tracker started. A slice whose trigger time is the one
// the last applied Snapshot had brought no change.
func (r *Record) observeTriggers(snap *service.Snapshot, end time.Time) {
	now := make(map[string]time.Time, len(r.triggers))
	for _, svc := range snap.Services() {
		for _, t := range svc.Triggers {
			key := svc.NamespacedName.String() + "/" + t.Slice
			now[key] = t.At
			if t.At.After(r.started) && !t.At.Equal(r.triggers[key]) {
				r.programming.Observe(end.Sub(t.At).Seconds())
			}
		}
	}
	r.triggers = now
}

// NoLocalEndpoints counts the service ports of snap whose internal
// (internalTrafficPolicy: Local) or external (externalTrafficPolicy: Local,
// with a NodePort, externalIPs or LoadBalancer IPs) traffic is dropped on
// this node because none of its local endpoints is usable, while some
// endpoint is usable elsewhere: kube-proxy's serviceNoLocalEndpointsTotalInternal
// and ...External in syncProxyRules (pkg/proxy/iptables/proxier.go at v1.37.2),
// over the same CategorizeEndpoints (service.Port.Categorize). A port without
// any usable endpoint is rejected, not counted.
func NoLocalEndpoints(snap *service.Snapshot, node string) (internal, external int) {
	for _, p := range snap.Ports() {
		svc := p.Service
		if len(svc.ClusterIPs) == 0 {
			continue
		}
		c := p.Categorize(node, snap.Node())
		if !c.HasAny || len(c.Local) > 0 {
			continue
		}
		if svc.InternalPolicyLocal {
			internal++
		}
		if svc.ExternalPolicyLocal && p.ExternallyAccessible() {
			external++
		}
	}
	return internal, external
}

// Healthy is nil once a sync has succeeded, while the last one succeeded and
// no Snapshot has waited to be applied for longer than the bound.
func (r *Record) Healthy() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	waiting := r.pending
	if !r.inFlight.IsZero() && (waiting.IsZero() || r.inFlight.Before(waiting)) {
		waiting = r.inFlight
	}
	switch {
	case !r.synced && waiting.IsZero() && r.lastErr == nil:
		return errors.New("waiting for the first Snapshot")
	case r.lastErr != nil:
		return fmt.Errorf("last sync failed (%d in a row): %w", r.inARow, r.lastErr)
	case !r.synced:
		return errors.New("waiting for the first sync")
	}
	if lag := r.cfg.Now().Sub(waiting); !waiting.IsZero() && lag > r.cfg.LagBound {
		return fmt.Errorf("the rules lag the Snapshot by %s (bound %s)", lag.Round(time.Millisecond), r.cfg.LagBound)
	}
	return nil
}

// Lag is nil while no Snapshot has waited to be applied for longer than the
// bound, whatever the syncs did before: kube-proxy's ProxyHealthServer.Health,
// where a queued update is late only once it has waited healthTimeout. A
// failed sync leaves its Snapshot waiting (End), so failures that last count
// here once they outlast the bound.
func (r *Record) Lag() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	waiting := r.pending
	if !r.inFlight.IsZero() && (waiting.IsZero() || r.inFlight.Before(waiting)) {
		waiting = r.inFlight
	}
	if lag := r.cfg.Now().Sub(waiting); !waiting.IsZero() && lag > r.cfg.LagBound {
		return fmt.Errorf("the rules lag the Snapshot by %s (bound %s)", lag.Round(time.Millisecond), r.cfg.LagBound)
	}
	return nil
}

// Describe implements prometheus.Collector.
func (r *Record) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range r.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (r *Record) Collect(ch chan<- prometheus.Metric) {
	for _, c := range r.collectors() {
		c.Collect(ch)
	}
}

func (r *Record) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.duration, r.programming, r.applied, r.last, r.queued, r.failures, r.syncs, r.noLocal}
}
