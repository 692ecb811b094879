package kernelsync

import (
	"context"

	"github.com/svcproxy/svcproxy/service"
)

// Counts reads a mode's connection counters from the kernel, once, and
// returns how to count one port from them as the last sync applied it (ok
// false: the port has no counter).
type Counts[P Port] func(ctx context.Context) (count func(P) (n uint64, ok bool), err error)

// Connections returns, for each of ports that the last sync applied, the new
// connections (UDP: new flows) the kernel has taken for it, however they came
// (ClusterIP, NodePort, external IP, affinity), as read counts them: what
// hybrid's Promoter reads of a promoted port (dataplane.KernelPath). Each mode
// counts in its own way (iptables: its DNAT rules' packet counters, carried
// over when a sync rewrites them; nftables: a named counter per port, which
// outlives its chains); what they share is here: the count is read while no
// sync runs, so no rewrite moves it meanwhile, and the kernel is read once,
// only when some port of ports is applied.
func (l *Ledger[P]) Connections(ctx context.Context, ports map[service.PortName]bool, read Counts[P]) (map[service.PortName]uint64, error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	out := map[service.PortName]uint64{}
	var count func(P) (uint64, bool)
	for name := range ports {
		applied, ok := l.applied[name]
		if !ok {
			continue
		}
		if count == nil {
			var err error
			if count, err = read(ctx); err != nil {
				return nil, err
			}
		}
		if n, ok := count(applied); ok {
			out[name] = n
		}
	}
	return out, nil
}
