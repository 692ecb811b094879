package userspace

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/service"
)

// clearRejected deletes the UDP conntrack entries of the ports whose portal
// became a REJECT (no endpoint left to pick) or a DROP (none left on this node
// for internalTrafficPolicy Local) since the last call: every entry
// to their addresses (ClusterIP, external IPs, LoadBalancer IPs, with the
// port), so that a client that keeps sending meets the REJECT. Without it a
// one-way sender (statsd, logs) keeps its portal's entry alive, a REDIRECT to
// the listener, which drops its datagrams for as long as it sends: the kernel
// paths delete such entries, as kube-proxy's CleanStaleEntries does since
// kubernetes#139629. Node ports are left alone: their entries are matched by
// port alone, and another host's flows to that port number would go too
// (kube-proxy leaves them alone likewise). Ports without a portal of ours (no
// IPTables, or not Carries': a kernel path serves them and cleans its own) are
// skipped. It runs after the portals are applied: an entry deleted while the
// portal still REDIRECTed would be made again. A port whose deletion failed
// is tried again at the next sync; the error names it. p.mu is held.
func (p *Proxier) clearRejected(ctx context.Context) error {
	if p.cfg.Conntrack == nil || p.cfg.IPTables == nil {
		return nil
	}
	var errs []error
	for name, sp := range p.ports {
		sp.mu.Lock()
		port, rejected := sp.port, !sp.hasAny || sp.noInternal
		sp.mu.Unlock()
		if name.Protocol != service.UDP || !rejected || !p.cfg.carries(name) {
			sp.ctCleared = false
			continue
		}
		if sp.ctCleared {
			continue
		}
		svc := port.Service
		var err error
		for _, a := range p.cfg.Family.Addrs(slices.Concat(svc.ClusterIPs, svc.ExternalIPs, svc.LoadBalancerIPs)) {
			err = errors.Join(err, p.cfg.NetNS(func() error {
				_, err := p.cfg.Conntrack.Delete(ctx, conntrack.Filter{Protocol: "udp", OrigDst: a, OrigDstPort: port.Port})
				return err
			}))
		}
		sp.ctCleared = err == nil
		if err != nil {
			errs = append(errs, fmt.Errorf("service port %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
