package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/healthcheck"
)

// endpoints serves /healthz and /livez on one address and /metrics,
// /proxyMode, /status on another, as kube-proxy does (10256 and 10249).
type endpoints struct {
	dp       dataplane.Interface
	health   *healthcheck.Proxy
	registry *prometheus.Registry
	lastSync atomic.Int64 // unix nanos of the last Sync that returned no error; 0: none
	log      *slog.Logger
}

// newEndpoints registers dp, the health answers' counters, the Go runtime's
// and the process's metrics in a registry of their own: one per process.
func newEndpoints(dp dataplane.Interface, log *slog.Logger) *endpoints {
	e := &endpoints{dp: dp, registry: prometheus.NewRegistry(), log: log}
	e.health = healthcheck.NewProxy(healthcheck.ProxyConfig{Families: healthFamilies(dp), LastUpdated: e.lastUpdated})
	e.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "svcproxy_healthy",
			Help:        "1 while /healthz answers 200: the rules are synced, do not lag the Snapshot beyond the bound, and the node is not going away.",
			ConstLabels: prometheus.Labels{"mode": dp.Mode()},
		}, func() float64 {
			if e.health.Healthy() != nil {
				return 0
			}
			return 1
		}),
		e.health,
		dp,
	)
	return e
}

// healthFamilies are dp's IP families as the health answers see them: each
// family's own dataplane where dp is one per family (cmd/svcproxy's always
// is), else dp as one family.
func healthFamilies(dp dataplane.Interface) []healthcheck.Family {
	fams, ok := dp.(*dataplane.Families)
	if !ok {
		return []healthcheck.Family{{Name: "IPv4", Healthy: dp.Healthy, Lag: dp.Lag}}
	}
	var out []healthcheck.Family
	for _, fam := range fams.IPFamilies() {
		f := fams.Family(fam)
		out = append(out, healthcheck.Family{Name: string(fam), Healthy: f.Healthy, Lag: f.Lag})
	}
	return out
}

// markSynced records a Sync that returned no error.
func (e *endpoints) markSynced() { e.lastSync.Store(time.Now().UnixNano()) }

func (e *endpoints) lastUpdated() time.Time {
	if n := e.lastSync.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

func (e *endpoints) proxyMode(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, e.dp.Mode())
}

func (e *endpoints) status(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(e.dp.Status())
}

// servers are the addresses and the options of the two HTTP servers.
type servers struct {
	HealthzAddr, MetricsAddr string
	// Configz, when not nil, answers /configz on the metrics address.
	Configz http.Handler
	// Profiling serves Go's /debug/pprof/ on the metrics address.
	Profiling bool
	// HardFail: see healthcheck.ServeOptions.
	HardFail bool
}

// serve runs the two HTTP servers until ctx ends. An address of "" or "0"
// turns a server off, as kube-proxy allows.
func (e *endpoints) serve(ctx context.Context, s servers) error {
	health := http.NewServeMux()
	health.HandleFunc("/healthz", e.health.ServeHealthz)
	health.HandleFunc("/livez", e.health.ServeLivez)
	metrics := http.NewServeMux()
	metrics.Handle("/metrics", promhttp.HandlerFor(e.registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(e.log.Handler(), slog.LevelWarn)}))
	metrics.HandleFunc("/proxyMode", e.proxyMode)
	metrics.HandleFunc("/status", e.status)
	metrics.HandleFunc("/healthz", e.health.ServeHealthz)
	metrics.HandleFunc("/livez", e.health.ServeLivez)
	if s.Configz != nil {
		metrics.Handle("/configz", s.Configz)
	}
	if s.Profiling {
		// kube-proxy's enableProfiling: net/http/pprof's handlers on the
		// metrics server (routes.Profiling).
		metrics.HandleFunc("/debug/pprof/", pprof.Index)
		metrics.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		metrics.HandleFunc("/debug/pprof/profile", pprof.Profile)
		metrics.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		metrics.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return healthcheck.ServeEndpoints(ctx, []healthcheck.Endpoint{{Addr: s.HealthzAddr, Handler: health}, {Addr: s.MetricsAddr, Handler: metrics}},
		healthcheck.ServeOptions{HardFail: s.HardFail, Log: e.log})
}
