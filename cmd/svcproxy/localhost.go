package main

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// localhostNodePorts is nftables mode with localhost NodePorts (KEP-6032,
// alpha in kube-proxy 1.37): the table, and beside it the userspace Proxier in
// its LocalhostNodePorts mode, listening on 127.0.0.1:<nodePort> (or
// [::1]:<nodePort>) for each TCP NodePort with an endpoint to go to. A
// DNAT cannot take a packet from 127.0.0.1 to a pod without route_localnet
// (docs/operations.md), so these connections are proxied in Go, as
// kube-proxy's pkg/proxy/localnodeportproxy does; the table rejects and
// counts UDP and SCTP there. A port another socket holds is logged once
// and retried (userspace.Proxier.Run); the table is served all the same.
type localhostNodePorts struct {
	dataplane.Interface // nftables mode
	p                   *userspace.Proxier
	log                 *slog.Logger

	mu     sync.Mutex
	logged map[string]bool // listener errors logged, while they last
}

// newLocalhostNodePorts puts fam's localhost listeners beside the nftables
// mode dp (whose table must have been made with LocalhostNodePorts).
func newLocalhostNodePorts(cfg *Config, fam service.Family, dp dataplane.Interface, log *slog.Logger) *localhostNodePorts {
	loopback := netip.MustParseAddr("127.0.0.1")
	if fam == service.IPv6 {
		loopback = netip.IPv6Loopback()
	}
	log = log.With("component", "localhost-nodeports", "ipFamily", string(fam))
	return &localhostNodePorts{
		Interface: dp,
		p: userspace.New(userspace.Config{
			Family:             fam,
			BindAddress:        loopback,
			LocalhostNodePorts: true,
			NodeName:           cfg.NodeName,
			ClusterCIDRs:       cfg.ClusterCIDRs,
			ShutdownGrace:      cfg.ShutdownGrace,
			Logger:             log,
		}),
		log:    log,
		logged: map[string]bool{},
	}
}

// Sync implements dataplane.Interface: the table first, then the listeners.
// Only the table's error is returned: a node port whose listener cannot be
// bound is logged, counted and skipped, as kube-proxy's SyncNodePorts does,
// and does not make the proxy unhealthy.
func (l *localhostNodePorts) Sync(ctx context.Context, snap *service.Snapshot) error {
	err := l.Interface.Sync(ctx, snap)
	if lerr := l.p.Sync(snap); lerr != nil && errors.Is(lerr, userspace.ErrClosed) {
		return errors.Join(err, lerr)
	}
	l.logListenerErrors()
	return err
}

// logListenerErrors logs each listener that could not be bound, once while it
// lasts (the Proxier retries it with backoff).
func (l *localhostNodePorts) logListenerErrors() {
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
func (l *localhostNodePorts) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.p.Run(ctx) }()
	err := l.Interface.Run(ctx)
	cancel()
	return errors.Join(err, <-done)
}

// Status implements dataplane.Interface: nftables mode's, with the
// listeners under "localhostNodePorts".
func (l *localhostNodePorts) Status() any {
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
func (l *localhostNodePorts) Describe(ch chan<- *prometheus.Desc) {
	l.Interface.Describe(ch)
	ch <- localhostListenersDesc
	ch <- localhostFailuresDesc
}

// Collect implements prometheus.Collector.
func (l *localhostNodePorts) Collect(ch chan<- prometheus.Metric) {
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
