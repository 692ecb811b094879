package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

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

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("clusterdns stopped", "err", err)
		os.Exit(1)
	}
	log.Info("clusterdns stopped")
}

// run serves DNS until ctx is done: the watcher publishes Snapshots, the
// Server indexes each one, and answers on the sockets opened here (opened
// before anything runs, so a busy port is an error at once).
func run(ctx context.Context, cfg *Config, log *slog.Logger) error {
	upstreams := cfg.Upstreams
	if len(upstreams) == 0 {
		var err error
		if upstreams, err = resolvConfUpstreams(cfg.ResolvConf); err != nil {
			log.Warn("no upstreams: names outside the zone will be refused", "err", err)
		}
	}
	srv, err := dnsresolve.New(dnsresolve.Config{
		Zone:            cfg.Zone,
		TTL:             cfg.TTL,
		Upstreams:       upstreams,
		UpstreamTimeout: cfg.UpstreamTimeout,
		CacheSize:       cfg.CacheSize,
		Logger:          log,
	})
	if err != nil {
		return err
	}
	watch.SetClientLogger(log)
	w, err := watch.New(watch.Config{ServicesFile: cfg.ServicesFile, Kubeconfig: cfg.Kubeconfig, Logger: log})
	if err != nil {
		return err
	}
	pc, ln, err := dnsresolve.Listen(cfg.Listen)
	if err != nil {
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
	log.Info("clusterdns serving", "listen", pc.LocalAddr().String(), "zone", cfg.Zone,
		"upstreams", upstreams, "ttl", cfg.TTL, "metrics", cfg.MetricsAddr)

	g, ctx := errgroup.WithContext(ctx)
	snaps := w.Subscribe()
	g.Go(func() error { return w.Run(ctx) })
	g.Go(func() error { return applySnapshots(ctx, snaps, srv, log) })
	g.Go(func() error { return srv.Serve(ctx, pc, ln) })
	if metrics != nil {
		g.Go(func() error { return serveHTTP(ctx, metrics, srv.HTTPHandler()) })
	}
	return g.Wait()
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
			srv.Update(snap)
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
