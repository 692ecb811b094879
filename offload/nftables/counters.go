package nftables

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/service"
)

// Connections returns, for each of ports that the last sync applied, the new
// connections (UDP: new flows) its DNAT rules have taken, however they came
// (ClusterIP, NodePort, external IP, affinity): the packets of the port's named
// counter (Config.CountConnections), which only a connection's first packet meets.
// The counter lives as long as the port: rewriting the port's chains does not
// reset it; a port removed and added again starts at 0.
func (p *Proxier) Connections(ctx context.Context, ports map[service.PortName]bool) (out map[service.PortName]uint64, err error) {
	p.sync.BetweenSyncs(func(applied map[service.PortName]*portObjects) {
		out, err = p.t.connections(ctx, applied, ports)
	})
	return out, err
}

func (t *transactor) connections(ctx context.Context, applied map[service.PortName]*portObjects, ports map[service.PortName]bool) (map[service.PortName]uint64, error) {
	out := map[service.PortName]uint64{}
	if applied == nil || !t.cfg.Rules.CountConnections {
		return out, nil
	}
	counters, err := t.cfg.NFT.ListCounters(ctx)
	if err != nil {
		return nil, fmt.Errorf("read counters of table %s: %w", Table, err)
	}
	packets := make(map[string]uint64, len(counters))
	for _, c := range counters {
		if c.Packets != nil {
			packets[c.Name] = *c.Packets
		}
	}
	for name := range ports {
		if po, ok := applied[name]; ok && po.counter != "" {
			out[name] = packets[po.counter]
		}
	}
	return out, nil
}

// LocalhostRejected returns, by protocol ("udp", "sctp"), the packets the
// table has rejected on localhost NodePorts (Config.LocalhostNodePorts): its
// named counters, as kube-proxy's nftCounterMetricCollector reads them. Nil
// without LocalhostNodePorts, or before the table exists.
func (p *Proxier) LocalhostRejected(ctx context.Context) (map[string]uint64, error) {
	if !p.t.cfg.Rules.LocalhostNodePorts {
		return nil, nil
	}
	counters, err := p.t.cfg.NFT.ListCounters(ctx)
	if knftables.IsNotFound(err) {
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
