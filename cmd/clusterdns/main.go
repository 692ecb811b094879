package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/svcproxy/svcproxy/dnsresolve"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "clusterdns:", err)
		os.Exit(2)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "clusterdns: -v:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGOGC)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	serve := run
	if cfg.Conf != "" {
		serve = runCorefile
	}
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("clusterdns stopped", "err", err)
		// Plain too: a Corefile's errors are one a line, as a person reads them.
		fmt.Fprintln(os.Stderr, "clusterdns:", err)
		os.Exit(1)
	}
	log.Info("clusterdns stopped")
}

// defaultGOGC is clusterdns's garbage collection target when the environment
// sets no GOGC: the heap may grow by half of what is live between
// collections, not by all of it (Go's default, 100). Nearly everything live is
// the index, the Snapshot and the informers' caches, which stay; the garbage
// is what each query leaves. Measured at 2,000 and 20,000 Services from an
// API server (docs/benchmarks.md), 50 took the resident size after load from
// 41 to 36 MiB and from 154-162 to 134-137 MiB, and the highest QPS did not
// move beyond the machine's noise: a collection marks the live heap, and at
// 20,000 Services and 25,000 queries a second one is needed every few
// seconds. CoreDNS sets nothing (Go's default).
const defaultGOGC = 50

// run serves DNS until ctx is done: the watcher publishes Snapshots, the
// Server indexes each one, and answers on the sockets opened here (opened
// before anything runs, so a busy port is an error at once).
func run(ctx context.Context, cfg *Config, log *slog.Logger) error {
	upstreams := cfg.Upstreams
	if len(upstreams) == 0 {
		var err error
		switch upstreams, err = resolvConfUpstreams(cfg.ResolvConf); {
		case err != nil:
			log.Warn("no upstreams: names outside the zone will be refused", "err", err)
		case len(upstreams) == 0: // a cluster-only server (docs/operations.md, loops)
			log.Info("no upstreams: names outside the zone will be refused", "resolvConf", cfg.ResolvConf, "why", "it lists no nameserver")
		}
	}
	watch.SetClientLogger(log)
	// Every Service, headless ones and those another proxy carries among
	// them (no ProxiedOnly): a name resolves whoever proxies it. No Node.
	// Namespaces, and Pods for "pods verified", as CoreDNS watches them.
	w, err := watch.New(watch.Config{ServicesFile: cfg.ServicesFile, MaxFileBytes: cfg.ServicesMaxBytes,
		Kubeconfig: cfg.Kubeconfig, Namespaces: true, Pods: cfg.Pods == dnsresolve.PodsVerified, Logger: log})
	if err != nil {
		return err
	}
	pc, ln, err := dnsresolve.Listen(cfg.Listen)
	if err != nil {
		return err
	}
	// One registry for the process: the server's metrics, Go's and the process's.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := dnsresolve.New(dnsresolve.Config{
		Zone:            cfg.Zone,
		TTL:             cfg.TTL,
		Upstreams:       upstreams,
		UpstreamTimeout: cfg.UpstreamTimeout,
		MaxConcurrent:   cfg.MaxConcurrent,
		CacheSize:       cfg.CacheSize,
		NSAddrs:         nsAddrs(cfg.Advertise, pc.LocalAddr()),
		Pods:            cfg.Pods,
		LogQueries:      cfg.LogQueries,
		Registry:        reg,
		Logger:          log,
	})
	if err != nil {
		pc.Close()
		ln.Close()
		return err
	}
	var metrics net.Listener
	if cfg.MetricsAddr != "" {
		if metrics, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			pc.Close()
			ln.Close()
			return fmt.Errorf("metrics: %w", err)
		}
	}
	log.Info("clusterdns serving", "listen", pc.LocalAddr().String(), "zone", cfg.Zone, "pods", cfg.Pods,
		"upstreams", upstreams, "ttl", cfg.TTL, "metrics", cfg.MetricsAddr)

	g, ctx := errgroup.WithContext(ctx)
	snaps := w.Subscribe()
	g.Go(func() error { return w.Run(ctx) })
	g.Go(func() error { return applySnapshots(ctx, snaps, srv, log) })
	g.Go(func() error { return srv.Serve(ctx, pc, ln) })
	if metrics != nil {
		h := srv.HTTPHandler()
		if cfg.Profiling {
			h = withProfiling(h)
		}
		g.Go(func() error { return serveHTTP(ctx, metrics, h) })
	}
	return g.Wait()
}

// withProfiling adds Go's profiler (/debug/pprof/) to h, as kube-proxy's
// enableProfiling does on its metrics address.
func withProfiling(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// applySnapshots indexes every Snapshot the watcher publishes until ctx is done.
func applySnapshots(ctx context.Context, snaps <-chan *service.Snapshot, srv *dnsresolve.Server, log *slog.Logger) error {
	first := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case snap := <-snaps:
			start := time.Now()
			if !srv.Update(snap) {
				continue // the Snapshot already indexed: a resync found nothing new
			}
			// Loading and indexing leave garbage several times the size of
			// what stays; without this the runtime returns it to the OS
			// only minutes later, and the RSS says the server needs it.
			debug.FreeOSMemory()
			if first {
				log.Info("first snapshot indexed: ready", "services", snap.Len(), "took", time.Since(start))
				first = false
			} else {
				log.Debug("snapshot indexed", "services", snap.Len(), "took", time.Since(start))
			}
		}
	}
}

// serveHTTP serves /metrics and /healthz until ctx is done.
func serveHTTP(ctx context.Context, l net.Listener, h http.Handler) error {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	<-errc
	return nil
}
