package main

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// userspaceMode is --mode userspace: every service port is a Go listener,
// reached from its ClusterIPs through REDIRECT portals.
type userspaceMode struct {
	p *userspace.Proxier
}

func newUserspace(cfg *Config, ipt iptables.Interface) (*userspaceMode, error) {
	pr, err := userspace.ParsePortRange(cfg.ProxyPortRange)
	if err != nil {
		return nil, fmt.Errorf("--proxy-port-range: %w", err)
	}
	return &userspaceMode{p: userspace.New(userspace.Config{
		PortRange:      pr,
		UDPIdleTimeout: cfg.UDPIdleTimeout,
		ShutdownGrace:  cfg.ShutdownGrace,
		IPTables:       ipt,
	})}, nil
}

func (m *userspaceMode) Mode() string { return modeUserspace }

func (m *userspaceMode) Sync(_ context.Context, snap *service.Snapshot) error {
	return m.p.Sync(snap)
}

func (m *userspaceMode) Run(ctx context.Context) error { return m.p.Run(ctx) }

func (m *userspaceMode) Healthy() error {
	if err := m.p.LastError(); err != nil {
		return fmt.Errorf("portals: %w", err)
	}
	return nil
}

func (m *userspaceMode) Status() any {
	return map[string]any{"mode": modeUserspace, "userspace": m.p.Status()}
}

func (m *userspaceMode) WriteMetrics(w io.Writer) {
	writeUserspaceMetrics(w, m.p.Stats())
}

// writeUserspaceMetrics writes the per-port counters in Prometheus text format.
func writeUserspaceMetrics(w io.Writer, stats map[service.PortName]userspace.Counters) {
	names := make([]service.PortName, 0, len(stats))
	for n := range stats {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].String() < names[j].String() })
	metric := func(name, kind, help string, value func(userspace.Counters) uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
		for _, n := range names {
			fmt.Fprintf(w, "%s{service_port=%q} %d\n", name, n.String(), value(stats[n]))
		}
	}
	metric("svcproxy_userspace_connections_total", "counter", "Connections (TCP) or sessions (UDP) accepted.",
		func(c userspace.Counters) uint64 { return c.ConnectionsOpened })
	metric("svcproxy_userspace_connections_active", "gauge", "Connections or sessions open now.",
		func(c userspace.Counters) uint64 { return c.ConnectionsActive })
	metric("svcproxy_userspace_bytes_from_clients_total", "counter", "Bytes copied from clients to endpoints.",
		func(c userspace.Counters) uint64 { return c.BytesFromClients })
	metric("svcproxy_userspace_bytes_to_clients_total", "counter", "Bytes copied from endpoints to clients.",
		func(c userspace.Counters) uint64 { return c.BytesToClients })
	metric("svcproxy_userspace_dial_failures_total", "counter", "Failed attempts to reach an endpoint.",
		func(c userspace.Counters) uint64 { return c.DialFailures })
}
