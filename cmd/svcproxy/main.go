// Command svcproxy is the node proxy: it watches Services and EndpointSlices
// (from an API server or a manifests file) and makes their virtual addresses
// work on this node, in userspace (Go copies the bytes), in the kernel
// (iptables DNAT, nftables, IPVS, the eBPF socket LB), or both (hybrid mode
// moves hot service ports to the kernel). It maps its flags to the mode's
// Config (package modes builds it) and runs the result.
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
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kubeproxyconfig"
	"github.com/svcproxy/svcproxy/modes"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "svcproxy:", err)
		os.Exit(2)
	}
	log := newLogger(cfg, os.Stderr)
	switch {
	case cfg.Version:
		fmt.Println(version())
		return
	case cfg.WriteConfigTo != "":
		if err := writeConfig(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "svcproxy:", err)
			os.Exit(1)
		}
		log.Info("wrote the configuration", "file", cfg.WriteConfigTo)
		return
	case cfg.InitOnly:
		// kube-proxy's --init-only sets what needs full privileges (its
		// conntrack sysctls) before a run with CAP_NET_ADMIN alone; svcproxy
		// sets none of those.
		log.Info("--init-only: svcproxy has nothing to set up before it runs")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	if cfg.Cleanup {
		if err := modes.Cleanup(ctx, cfg.modes(log)); err != nil {
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
	logConfig(cfg, log)
	applyOOMScoreAdj(cfg, log)
	w, err := watch.New(watch.Config{
		Kubeconfig:    cfg.Kubeconfig,
		Master:        cfg.Master,
		QPS:           cfg.QPS,
		Burst:         cfg.Burst,
		ServicesFile:  cfg.ServicesFile,
		MaxFileBytes:  cfg.ServicesMaxBytes,
		MinSyncPeriod: cfg.MinSyncPeriod,
		ResyncPeriod:  cfg.SyncPeriod,
		// This node's Node: its zone for traffic distribution, its deletion
		// and the autoscaler's taint for /healthz.
		NodeName: cfg.NodeName,
		// kube-proxy's selectors: not another proxy's Services, not
		// headless ones (clusterdns serves those, and so sets none).
		ProxiedOnly: true,
		// The loop below says when each sync has ended (w.Applied):
		// --min-sync-period counts from there, as kube-proxy's does, so a
		// sync longer than it is not followed by the next back to back.
		WaitForApplied: true,
		Logger:         log,
	})
	if errors.Is(err, watch.ErrFileTooLarge) {
		return fmt.Errorf("%w (raise --services-max-bytes to accept it)", err)
	}
	if err != nil {
		return err
	}
	var fileWatch *kubeproxyconfig.FileWatch
	if cfg.ConfigFile != "" {
		// As kube-proxy: a write to the file ends the process (Wait below).
		if fileWatch, err = kubeproxyconfig.WatchFile(cfg.ConfigFile); err != nil {
			return err
		}
	}
	logModeChoice(cfg, log)
	if cfg.ConfigFile != "" {
		modes.CleanupOthers(ctx, cfg.modes(log))
	}
	dp, err := modes.New(cfg.modes(log))
	if err != nil {
		if fileWatch != nil {
			fileWatch.Close()
		}
		return err
	}
	// kube-proxy's own line for its mode (createProxier), which courses
	// grep a pod's log for, then svcproxy's.
	log.Info("Using " + dp.Mode() + " Proxier")
	log.Info("svcproxy starting", "mode", dp.Mode(), "source", sourceName(cfg))
	ep := newEndpoints(dp, log.With("component", "http"))
	changes := dataplane.NewChangeMetrics(w.Changes)
	ep.registry.MustRegister(changes)
	own := newOwnListeners(cfg, log)
	hc := newHealthChecks(cfg, dp, log)
	defer hc.close()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	snaps := w.Subscribe()
	workers := 3
	done := make(chan struct{}, 4)
	if fileWatch != nil {
		workers++
		go func() { // kube-proxy's runLoop: the file changed, so stop
			if err := fileWatch.Wait(ctx); err != nil {
				cancel(err)
			}
			done <- struct{}{}
		}()
	}
	go func() { // named by its job: the source of Snapshots
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			cancel(fmt.Errorf("watch: %w", err))
		}
		done <- struct{}{}
	}()
	go func() {
		srv := servers{HealthzAddr: cfg.HealthzAddr, MetricsAddr: cfg.MetricsAddr,
			Configz: kubeproxyconfig.Configz(cfg.KubeProxy), Profiling: cfg.EnableProfiling, HardFail: cfg.BindAddressHardFail}
		if err := ep.serve(ctx, srv); err != nil {
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
			changes.Took(snap) // handed to the dataplane below: no longer pending
			snap = own.filter(snap)
			ep.health.SetNode(snap.Node())
			hc.sync(snap)
			asked, full := time.Now(), dataplane.FullSyncs(dp)
			if syncTo(ctx, dp, snap, log) {
				ep.markSynced()
			}
			if dataplane.FullSyncs(dp) != full {
				// This sync was full, or waited for the periodic one:
				// the changes held meanwhile have waited through it, so
				// --min-sync-period counts from when it was asked for
				// (docs/operations.md).
				w.AppliedSince(asked)
			} else {
				w.Applied()
			}
		case <-ctx.Done():
			for range workers {
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

// syncer is the part of a dataplane that syncTo uses.
type syncer interface {
	Sync(ctx context.Context, snap *service.Snapshot) error
}

// syncTo hands snap to the dataplane and reports whether it serves it. An
// error is logged: the dataplane keeps what it could apply and its Run
// retries the rest; /healthz says so until it succeeds. An error that comes
// because ctx ended is the shutdown cutting the sync short, and only a debug
// line: what was applied stays in the kernel after the process, as it does
// after every stop, and the log's last word is "svcproxy stopped".
func syncTo(ctx context.Context, dp syncer, snap *service.Snapshot, log *slog.Logger) bool {
	err := dp.Sync(ctx, snap)
	switch {
	case err == nil:
		return true
	case ctx.Err() != nil:
		log.Debug("sync cut short by the shutdown", "err", err)
	default:
		log.Warn("sync incomplete", "err", err)
	}
	return false
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
