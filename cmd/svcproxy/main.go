// Command svcproxy is the node proxy: it watches Services and EndpointSlices
// (from an API server or a manifests file) and makes their virtual addresses
// work on this node, in userspace (Go copies the bytes) or in the kernel
// (iptables DNAT or IPVS).
//
// It acts on the network namespace it runs in: run it inside the namespace it
// serves (the lab and the tests do), never casually on a machine you care about.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/svcproxy/svcproxy/service/watch"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "svcproxy:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	if cfg.Cleanup {
		if err := cleanup(ctx, cfg); err != nil {
			log.Error("cleanup incomplete", "err", err)
			os.Exit(1)
		}
		log.Info("cleanup done: no rules, virtual servers, interfaces or addresses of svcproxy remain")
		return
	}
	if err := run(ctx, cfg, log); err != nil {
		log.Error("svcproxy stopped", "err", err)
		os.Exit(1)
	}
}

// run serves until ctx ends: Snapshots from the watcher go to the dataplane of
// the chosen mode, and the HTTP endpoints report on it.
func run(ctx context.Context, cfg *Config, log *slog.Logger) error {
	watch.SetClientLogger(log) // client-go's own log lines, through slog
	w, err := watch.New(watch.Config{
		Kubeconfig:    cfg.Kubeconfig,
		ServicesFile:  cfg.ServicesFile,
		MaxFileBytes:  cfg.ServicesMaxBytes,
		MinSyncPeriod: cfg.MinSyncPeriod,
		ResyncPeriod:  cfg.SyncPeriod,
		Logger:        log,
	})
	if errors.Is(err, watch.ErrFileTooLarge) {
		return fmt.Errorf("%w (raise --services-max-bytes to accept it)", err)
	}
	if err != nil {
		return err
	}
	dp, err := newDataplane(cfg, log)
	if err != nil {
		return err
	}
	log.Info("svcproxy starting", "mode", dp.Mode(), "source", sourceName(cfg))
	ep := newEndpoints(dp, log.With("component", "http"))
	own := newOwnListeners(cfg, log)
	hc := newHealthChecks(cfg, dp, log)
	defer hc.close()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	snaps := w.Subscribe()
	done := make(chan struct{}, 3)
	go func() { // named by its job: the source of Snapshots
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			cancel(fmt.Errorf("watch: %w", err))
		}
		done <- struct{}{}
	}()
	go func() {
		if err := ep.serve(ctx, cfg.HealthzAddr, cfg.MetricsAddr); err != nil {
			cancel(fmt.Errorf("http: %w", err))
		}
		done <- struct{}{}
	}()
	go func() {
		if err := dp.Run(ctx); err != nil && ctx.Err() == nil {
			cancel(fmt.Errorf("%s: %w", dp.Mode(), err))
		}
		done <- struct{}{}
	}()

	for {
		select {
		case snap := <-snaps:
			snap = own.filter(snap)
			hc.sync(snap)
			if err := dp.Sync(ctx, snap); err != nil {
				// The dataplane keeps what it could apply and its Run retries
				// the rest; /healthz says so until it succeeds.
				log.Warn("sync incomplete", "err", err)
			} else {
				ep.markSynced()
			}
		case <-ctx.Done():
			for range 3 {
				<-done
			}
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			log.Info("svcproxy stopped")
			return nil
		}
	}
}

func sourceName(cfg *Config) string {
	switch {
	case cfg.ServicesFile != "":
		return "file " + cfg.ServicesFile
	case cfg.Kubeconfig != "":
		return "kubeconfig " + cfg.Kubeconfig
	}
	return "in-cluster"
}
