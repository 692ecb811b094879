package localhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// Config configures nftables mode with localhost NodePorts.
type Config struct {
	// Node is the node served. The listeners bind its Family's loopback
	// address, 127.0.0.1 (IPv4, also when empty) or ::1 (IPv6); NodeName
	// says which endpoints are local, for externalTrafficPolicy Local.
	dataplane.Node
	// Kernel is the kernel mode beside the listeners: nftables mode, or the
	// socket LB with nftables beside it, its table made with
	// LocalhostNodePorts (it rejects and counts UDP and SCTP on loopback).
	// Required.
	Kernel dataplane.Interface
	// ShutdownGrace is how long open connections may finish when Run's
	// context ends (userspace.Config).
	ShutdownGrace time.Duration
	// Logger gets a line for each node port whose listener cannot be bound;
	// nil: slog.Default().
	Logger *slog.Logger
}

// Dataplane is nftables mode with localhost NodePorts (KEP-6032, alpha in
// kube-proxy 1.37): the table, and beside it the userspace Proxier in its
// LocalhostNodePorts mode, listening on 127.0.0.1:<nodePort> (or
// [::1]:<nodePort>) for each TCP NodePort with an endpoint to go to. A DNAT
// cannot take a packet from 127.0.0.1 to a pod without route_localnet
// (docs/operations.md), so these connections are proxied in Go, as
// kube-proxy's pkg/proxy/localnodeportproxy does; the table rejects and
// counts UDP and SCTP there. A port another socket holds is logged once and
// retried (userspace.Proxier.Run); the table is served all the same.
type Dataplane struct {
	dataplane.Interface // the kernel mode: nftables, or socklb
	p                   *userspace.Proxier
	log                 *slog.Logger

	mu     sync.Mutex
	logged map[string]bool // listener errors logged, while they last
}

// New puts cfg.Family's localhost listeners beside cfg.Kernel.
func New(cfg Config) (*Dataplane, error) {
	if cfg.Kernel == nil {
		return nil, errors.New("localhost NodePorts: no nftables mode to serve beside")
	}
	if err := cfg.Node.Check(); err != nil {
		return nil, fmt.Errorf("localhost NodePorts config: %w", err)
	}
	loopback := netip.MustParseAddr("127.0.0.1")
	if cfg.Family == service.IPv6 {
		loopback = netip.IPv6Loopback()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("component", "localhost-nodeports", "ipFamily", string(cfg.Family))
	return &Dataplane{
		Interface: cfg.Kernel,
		p: userspace.NewProxier(userspace.Config{
			Node:               cfg.Node,
			BindAddress:        loopback,
			LocalhostNodePorts: true,
			ShutdownGrace:      cfg.ShutdownGrace,
			Logger:             log,
		}),
		log:    log,
		logged: map[string]bool{},
	}, nil
}

// Listeners is the userspace Proxier of the localhost listeners (for tests
// and tools).
func (l *Dataplane) Listeners() *userspace.Proxier { return l.p }

// Sync implements dataplane.Interface: the table first, then the listeners.
// Only the table's error is returned: a node port whose listener cannot be
// bound is logged, counted and skipped, as kube-proxy's SyncNodePorts does,
// and does not make the proxy unhealthy.
func (l *Dataplane) Sync(ctx context.Context, snap *service.Snapshot) error {
	err := l.Interface.Sync(ctx, snap)
	if lerr := l.p.Sync(snap); lerr != nil && errors.Is(lerr, userspace.ErrClosed) {
		return errors.Join(err, lerr)
	}
	l.logListenerErrors()
	return err
}

// logListenerErrors logs each listener that could not be bound, once while it
// lasts (the userspace Proxier retries it with backoff).
func (l *Dataplane) logListenerErrors() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := map[string]bool{}
	for _, ps := range l.p.Status().Ports {
		if ps.Error == "" {
			continue
		}
		now[ps.Error] = true
		if !l.logged[ps.Error] {
			l.log.Warn("localhost NodePort skipped: cannot listen", "servicePort", ps.Name, "err", ps.Error)
		}
	}
	l.logged = now
}

// Run implements dataplane.Interface: the table's lifecycle and the
// listeners', until ctx ends or the table's stops; then the listeners shut
// down (open connections get --shutdown-grace).
func (l *Dataplane) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.p.Run(ctx) }()
	err := l.Interface.Run(ctx)
	cancel()
	return errors.Join(err, <-done)
}

// FullSyncs implements dataplane.FullSyncer: the table's full syncs, which
// cmd/svcproxy counts around each sync (the listeners make none).
func (l *Dataplane) FullSyncs() uint64 { return dataplane.FullSyncs(l.Interface) }

// Status implements dataplane.Interface: nftables mode's, with the
// listeners under "localhostNodePorts".
func (l *Dataplane) Status() any {
	st := map[string]any{}
	if m, ok := l.Interface.Status().(map[string]any); ok {
		st = maps.Clone(m)
	} else {
		st["nftables"] = l.Interface.Status()
	}
	st["localhostNodePorts"] = l.p.Status()
	return st
}

// kube-proxy's metrics of the localhost listeners (pkg/proxy/metrics:
// LocalhostNodePortListeners, LocalhostNodePortListenerCreationFailuresTotal);
// dataplane.Families adds the label ip_family.
var (
	localhostListenersDesc = prometheus.NewDesc("kubeproxy_nftables_localhost_nodeport_listeners",
		"Number of active localhost NodePort userspace proxy listeners.", nil, nil)
	localhostFailuresDesc = prometheus.NewDesc("kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total",
		"Number of localhost NodePort userspace proxy listener creation failures.", nil, nil)
)

// Describe implements prometheus.Collector.
func (l *Dataplane) Describe(ch chan<- *prometheus.Desc) {
	l.Interface.Describe(ch)
	ch <- localhostListenersDesc
	ch <- localhostFailuresDesc
}

// Collect implements prometheus.Collector.
func (l *Dataplane) Collect(ch chan<- prometheus.Metric) {
	l.Interface.Collect(ch)
	listening := 0
	for _, ps := range l.p.Status().Ports {
		if ps.NodePort != 0 {
			listening++
		}
	}
	ch <- prometheus.MustNewConstMetric(localhostListenersDesc, prometheus.GaugeValue, float64(listening))
	ch <- prometheus.MustNewConstMetric(localhostFailuresDesc, prometheus.CounterValue, float64(l.p.ListenFailures()))
}
