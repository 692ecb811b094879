package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
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
	// HardFail: a server that cannot listen ends serve with the error.
	// Otherwise, as kube-proxy without bindAddressHardFail (serveHealthz,
	// serveMetrics: wait.Until every 5 s), the failure is logged and the
	// listen retried every retryEvery while the other server serves.
	HardFail   bool
	retryEvery time.Duration
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
	if s.retryEvery == 0 {
		s.retryEvery = 5 * time.Second
	}

	errc := make(chan error, 2)
	var mu sync.Mutex
	var running []*http.Server
	var listeners sync.WaitGroup
	for _, srv := range []struct {
		addr string
		mux  *http.ServeMux
	}{{s.HealthzAddr, health}, {s.MetricsAddr, metrics}} {
		if srv.addr == "" || srv.addr == "0" {
			continue
		}
		ln, err := net.Listen("tcp", srv.addr)
		if err != nil && s.HardFail {
			return fmt.Errorf("listen %s: %w", srv.addr, err)
		}
		hs := &http.Server{Handler: srv.mux, ReadHeaderTimeout: 5 * time.Second}
		mu.Lock()
		running = append(running, hs)
		mu.Unlock()
		if err != nil {
			// Retried until it listens or ctx ends (named: retryListen).
			e.log.Error("cannot listen, retrying (bindAddressHardFail is off)", "addr", srv.addr, "err", err, "every", s.retryEvery)
			listeners.Add(1)
			go func() {
				defer listeners.Done()
				e.retryListen(ctx, srv.addr, s.retryEvery, hs, errc)
			}()
			continue
		}
		go func() { errc <- hs.Serve(ln) }()
		e.log.Info("serving", "addr", ln.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	mu.Lock()
	for _, hs := range running {
		_ = hs.Shutdown(sctx)
	}
	mu.Unlock()
	listeners.Wait()
	return nil
}

// retryListen listens on addr every interval until it succeeds, then serves
// hs there; it returns when ctx ends.
func (e *endpoints) retryListen(ctx context.Context, addr string, every time.Duration, hs *http.Server, errc chan<- error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			e.log.Debug("still cannot listen", "addr", addr, "err", err)
			continue
		}
		e.log.Info("serving", "addr", ln.Addr().String())
		go func() { errc <- hs.Serve(ln) }()
		return
	}
}
