package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"sync/atomic"
	"time"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	offloadiptables "github.com/svcproxy/svcproxy/offload/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// iptablesMode is --mode iptables: DNAT chains per service port, rendered from
// the Snapshot and applied in one iptables-restore.
type iptablesMode struct {
	p *offloadiptables.Proxier
	// firstUpdate is when the first Snapshot was handed over: until a sync
	// has ended after it, the rules are not yet the Services' rules.
	firstUpdate atomic.Int64
}

// newIPTables builds iptables mode; include, if not nil, restricts it to some
// ports (hybrid mode's promoted ones).
func newIPTables(cfg *Config, ipt kiptables.Interface, log *slog.Logger, include func(*service.Port) bool) (*iptablesMode, error) {
	var ct conntrack.Interface = &conntrack.Real{}
	if _, err := exec.LookPath("conntrack"); err != nil {
		// Without the tool, UDP clients of a removed endpoint stay blackholed
		// until their conntrack entry times out; say so once and go on.
		log.Warn("no conntrack cleanup of stale UDP flows: conntrack(8) not found", "err", err)
		ct = nil
	}
	p, err := offloadiptables.NewProxier(offloadiptables.ProxierConfig{
		Rules: offloadiptables.Config{
			NodeName:      cfg.NodeName,
			NodeIPs:       cfg.NodeIPs,
			ClusterCIDR:   cfg.ClusterCIDR,
			MasqueradeAll: cfg.MasqueradeAll,
			Include:       include,
		},
		IPTables:      ipt,
		Conntrack:     ct,
		SyncPeriod:    cfg.SyncPeriod,
		MinSyncPeriod: cfg.MinSyncPeriod,
	})
	if err != nil {
		return nil, err
	}
	return &iptablesMode{p: p}, nil
}

func (m *iptablesMode) Mode() string { return modeIPTables }

// Sync hands the Snapshot to the proxier's own loop, which applies it (at most
// once per --min-sync-period).
func (m *iptablesMode) Sync(_ context.Context, snap *service.Snapshot) error {
	m.firstUpdate.CompareAndSwap(0, time.Now().UnixNano())
	m.p.Update(snap)
	return nil
}

func (m *iptablesMode) Run(ctx context.Context) error {
	m.p.Run(ctx)
	return nil
}

func (m *iptablesMode) Healthy() error {
	h := m.p.Health()
	switch {
	// A sync that started before the first Snapshot arrived applied none of
	// it, however late it ended.
	case !h.Synced || m.firstUpdate.Load() == 0 || h.LastSync.Add(-h.LastSyncDuration).UnixNano() < m.firstUpdate.Load():
		return errors.New("iptables: waiting for the first sync")
	case !h.Healthy:
		return fmt.Errorf("iptables: last sync failed (%d in a row): %s", h.ConsecutiveFailures, h.LastError)
	}
	return nil
}

func (m *iptablesMode) Status() any {
	return map[string]any{"mode": modeIPTables, "health": m.p.Health(), "ports": m.p.Status()}
}

func (m *iptablesMode) WriteMetrics(w io.Writer) {
	h := m.p.Health()
	counter := func(name, help string, v uint64, labels string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s%s %d\n", name, help, name, name, labels, v)
	}
	counter("svcproxy_sync_total", "Syncs of the kernel dataplane.", h.FullSyncs, `{mode="iptables",kind="full"}`)
	fmt.Fprintf(w, "svcproxy_sync_total{mode=\"iptables\",kind=\"partial\"} %d\n", h.PartialSyncs)
	counter("svcproxy_sync_failures_total", "Syncs that failed (retried with backoff).", h.Failures, `{mode="iptables"}`)
	fmt.Fprintf(w, "# HELP svcproxy_sync_duration_seconds How long the last successful sync took.\n# TYPE svcproxy_sync_duration_seconds gauge\nsvcproxy_sync_duration_seconds{mode=\"iptables\"} %.6f\n", h.LastSyncDuration.Seconds())
	fmt.Fprintf(w, "# HELP svcproxy_iptables_restore_bytes Size of the last iptables-restore input.\n# TYPE svcproxy_iptables_restore_bytes gauge\nsvcproxy_iptables_restore_bytes %d\n", h.RestoreBytes)
	counter("svcproxy_conntrack_deleted_total", "Stale UDP conntrack entries deleted.", h.ConntrackDeleted, "")
}
