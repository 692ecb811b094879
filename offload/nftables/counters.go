package nftables

import (
	"context"
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/dataplane"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
)

// Connections implements dataplane.KernelPath: for each of ports that the
// last sync applied, the new connections (UDP: new flows) its DNAT rules have
// taken (kernelsync.Ledger.Connections): the packets of the port's named
// counter (Config.CountConnections), which only a connection's first packet
// meets. The counter lives as long as the port: rewriting the port's chains
// does not reset it; a port removed and added again starts at 0.
func (d *Dataplane) Connections(ctx context.Context, _ *service.Snapshot, ports dataplane.PortSet) (map[service.PortName]uint64, error) {
	if !d.cfg.CountConnections {
		return map[service.PortName]uint64{}, nil
	}
	return d.Ledger.Connections(ctx, ports, func(ctx context.Context) (func(*portObjects) (uint64, bool), error) {
		counters, err := d.cfg.NFT.ListCounters(ctx)
		if err != nil {
			return nil, fmt.Errorf("read counters of table %s: %w", Table, err)
		}
		packets := make(map[string]uint64, len(counters))
		for _, c := range counters {
			if c != nil && c.Packets != nil { // knftables' Fake (v0.0.22) lists a nil before each counter
				packets[c.Name] = *c.Packets
			}
		}
		return func(po *portObjects) (uint64, bool) { return packets[po.counter], po.counter != "" }, nil
	})
}

// LocalhostRejected returns, by protocol ("udp", "sctp"), the packets the
// table has rejected on localhost NodePorts (Config.LocalhostNodePorts): its
// named counters, as kube-proxy's nftCounterMetricCollector reads them. Nil
// without LocalhostNodePorts, or before the table exists.
func (d *Dataplane) LocalhostRejected(ctx context.Context) (map[string]uint64, error) {
	if !d.cfg.LocalhostNodePorts {
		return nil, nil
	}
	counters, err := d.cfg.NFT.ListCounters(ctx)
	if knft.IsNotFound(err) { // knftables' errors and Real's netlink ones
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read counters of table %s: %w", Table, err)
	}
	out := map[string]uint64{}
	for _, c := range counters {
		if c == nil {
			continue // knftables' Fake (v0.0.22) lists a nil before each counter
		}
		if proto, ok := strings.CutPrefix(c.Name, prefixLocalhostRejected); ok && c.Packets != nil {
			out[proto] = *c.Packets
		}
	}
	return out, nil
}
