package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"

	"github.com/svcproxy/svcproxy/dataplane"
	offloadipvs "github.com/svcproxy/svcproxy/offload/ipvs"
	"github.com/svcproxy/svcproxy/service"
)

// ownListeners refuses endpoints that are svcproxy's own /healthz and
// /metrics listeners (else an endpoint at the node's 10249 would serve the
// localhost-only /status to any pod through a ClusterIP). Loopback and
// link-local endpoints are refused by package service already, as the API
// server refuses them; the node's own addresses only this process knows.
type ownListeners struct {
	addrs    map[netip.AddrPort]string // a listener bound to one address
	anyPort  map[uint16]string         // a listener bound to every address (0.0.0.0)
	nodeIPs  map[netip.Addr]bool
	log      *slog.Logger
	reported map[string]bool
}

func newOwnListeners(cfg *Config, log *slog.Logger) *ownListeners {
	o := &ownListeners{addrs: map[netip.AddrPort]string{}, anyPort: map[uint16]string{}, nodeIPs: map[netip.Addr]bool{}, log: log, reported: map[string]bool{}}
	for _, l := range []struct{ addr, what string }{{cfg.HealthzAddr, "/healthz"}, {cfg.MetricsAddr, "/metrics and /status"}} {
		host, port, err := net.SplitHostPort(l.addr)
		if err != nil {
			continue // "" or "0": off
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			continue
		}
		ip, err := netip.ParseAddr(host)
		switch {
		case host == "" || (err == nil && ip.IsUnspecified()):
			o.anyPort[uint16(n)] = l.what
		case err == nil:
			o.addrs[netip.AddrPortFrom(ip.Unmap(), uint16(n))] = l.what
		}
	}
	if ips, err := (dataplane.Host{IPs: cfg.NodeIPs}).Addrs(offloadipvs.DefaultInterface); err == nil {
		for _, ip := range ips {
			o.nodeIPs[ip] = true
		}
	}
	return o
}

// why says why ep must not be an endpoint.
func (o *ownListeners) why(ep service.Endpoint) string {
	a := netip.AddrPortFrom(ep.Addr.Addr().Unmap(), ep.Addr.Port())
	if what, ok := o.addrs[a]; ok {
		return fmt.Sprintf("is svcproxy's own %s listener; refused", what)
	}
	if what, ok := o.anyPort[a.Port()]; ok && o.nodeIPs[a.Addr()] {
		return fmt.Sprintf("is svcproxy's own %s listener on this node; refused", what)
	}
	return ""
}

// filter returns snap without such endpoints, logging each refusal once while
// it lasts.
func (o *ownListeners) filter(snap *service.Snapshot) *service.Snapshot {
	out, errs := service.RefuseEndpoints(snap, o.why)
	now := map[string]bool{}
	for _, err := range errs {
		msg := err.Error()
		now[msg] = true
		if !o.reported[msg] {
			o.log.Warn("endpoint refused", "err", msg)
		}
	}
	o.reported = now
	return out
}
