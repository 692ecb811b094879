package main

import (
	"log/slog"
	"net/netip"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/healthcheck"
	"github.com/svcproxy/svcproxy/service"
)

// healthChecks serves kube-proxy's service health checks (spec.healthCheckNodePort
// of externalTrafficPolicy: Local Services) in every mode, and logs a failure to
// open one once while it lasts.
type healthChecks struct {
	s       *healthcheck.Server
	log     *slog.Logger
	lastErr string
}

func newHealthChecks(cfg *Config, dp dataplane.Interface, log *slog.Logger) *healthChecks {
	var addrs []netip.Addr // --node-ip without loopback; none: every address
	for _, a := range cfg.NodeIPs {
		if !a.Unmap().IsLoopback() {
			addrs = append(addrs, a)
		}
	}
	return &healthChecks{
		s:   healthcheck.New(healthcheck.Config{NodeName: cfg.NodeName, Addresses: addrs, ProxyHealthy: dp.Healthy}),
		log: log.With("component", "healthcheck"),
	}
}

func (h *healthChecks) sync(snap *service.Snapshot) {
	err := h.s.Sync(snap)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != h.lastErr && err != nil {
		h.log.Warn("service health check not served", "err", err)
	}
	h.lastErr = msg
}

func (h *healthChecks) close() { h.s.Close() }
