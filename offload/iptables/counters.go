package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/dataplane"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// Connections implements dataplane.KernelPath: for each of ports that the
// last sync applied, the new connections (UDP: new flows) its DNAT rules have
// taken (kernelsync.Ledger.Connections): the packet counters of the DNAT
// rules in its SVCP-SEP- chains, plus what syncs that rewrote those chains
// carried over (Config.CountConnections). In the nat table only the first
// packet of a connection is evaluated, so packets are connections.
func (d *Dataplane) Connections(ctx context.Context, _ *service.Snapshot, ports dataplane.PortSet) (map[service.PortName]uint64, error) {
	return d.Ledger.Connections(ctx, ports, func(ctx context.Context) (func(*portRules) (uint64, bool), error) {
		dnat, err := d.dnatCounts(ctx)
		if err != nil {
			return nil, err
		}
		return func(pr *portRules) (uint64, bool) {
			n := d.carried[pr.name]
			for _, c := range pr.chains {
				n += dnat[c]
			}
			return n, true
		}, nil
	})
}

// carryCounts adds, before a restore of pl, the counters of the chains pl
// rewrites or deletes to their ports' carried totals: a declared chain starts
// again at [0:0]. The packets that arrive between the read and the restore
// are the only ones not counted.
func (d *Dataplane) carryCounts(ctx context.Context, pl *plan, applied map[service.PortName]*portRules) error {
	if !d.cfg.CountConnections || applied == nil {
		return nil
	}
	touched := map[string]bool{}
	for _, pr := range pl.ports {
		for _, c := range pr.chains {
			touched[c] = true
		}
	}
	for _, c := range pl.stale {
		touched[c] = true
	}
	var dnat map[string]uint64
	for name, pr := range applied {
		for _, c := range pr.chains {
			if !touched[c] {
				continue
			}
			if dnat == nil {
				var err error
				if dnat, err = d.dnatCounts(ctx); err != nil {
					return fmt.Errorf("iptables sync: carrying the connection counters over: %w", err)
				}
			}
			d.carried[name] += dnat[c]
		}
	}
	return nil
}

// forget drops the carried counts of ports the last sync removed: a port that
// comes back starts at 0.
func (d *Dataplane) forget(removed []*portRules) {
	for _, pr := range removed {
		delete(d.carried, pr.name)
	}
}

func (d *Dataplane) dnatCounts(ctx context.Context) (map[string]uint64, error) {
	cr, ok := d.cfg.IPTables.(kiptables.CounterReader)
	if !ok {
		return nil, fmt.Errorf("%T cannot read rule counters", d.cfg.IPTables)
	}
	save, err := cr.SaveCounters(ctx, kiptables.TableNAT)
	if err != nil {
		return nil, err
	}
	return dnatCounts(save), nil
}

// dnatCounts reads `iptables-save -c` output and returns, per chain, the packets
// that its DNAT rules matched. A counted rule reads
//
//	[12:720] -A SVCP-SEP-XYZ -m comment --comment "default/web:http" -m tcp -p tcp -j DNAT --to-destination 198.19.2.2:8080
func dnatCounts(save []byte) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(save))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		end := strings.IndexByte(line, ']')
		if !strings.HasPrefix(line, "[") || end < 0 {
			continue
		}
		packets, _, _ := strings.Cut(line[1:end], ":")
		n, err := strconv.ParseUint(packets, 10, 64)
		if err != nil {
			continue
		}
		f := strings.Fields(line[end+1:])
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		if i := slices.Index(f, "-j"); i > 0 && i+1 < len(f) && f[i+1] == "DNAT" {
			out[f[1]] += n
		}
	}
	return out
}
