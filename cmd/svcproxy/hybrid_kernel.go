package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// iptablesKernel is hybrid's iptables path: iptables mode restricted to the
// promoted ports.
type iptablesKernel struct {
	*iptablesMode
	// saveCounters returns the nat table with its counters (`iptables-save -c
	// -t nat`).
	saveCounters func(ctx context.Context) ([]byte, error)
}

var _ kernelPath = (*iptablesKernel)(nil)

func newIPTablesKernel(cfg *Config, ipt kiptables.Interface, log *slog.Logger, carried func(service.PortName) bool) (*iptablesKernel, error) {
	m, err := newIPTables(cfg, ipt, log, func(p *service.Port) bool { return carried(p.Name) })
	if err != nil {
		return nil, err
	}
	cr, ok := ipt.(kiptables.CounterReader)
	if !ok {
		return nil, fmt.Errorf("hybrid: %T cannot read rule counters", ipt)
	}
	save := func(ctx context.Context) ([]byte, error) { return cr.SaveCounters(ctx, kiptables.TableNAT) }
	return &iptablesKernel{iptablesMode: m, saveCounters: save}, nil
}

// apply hands snap to the proxier (whose own loop keeps resyncing it) and syncs
// at once, so that the caller knows the rules are in place.
func (k *iptablesKernel) apply(ctx context.Context, snap *service.Snapshot) error {
	_ = k.iptablesMode.Sync(ctx, snap) // only hands snap over
	return k.p.Sync(ctx)
}

// connections counts the packets of each port's DNAT rules (in its SVCP-SEP-
// chains). In the nat table only the first packet of a connection is
// evaluated, so these are new connections (for UDP, new flows), however they
// came: ClusterIP, NodePort, external IP, with or without affinity. A chain
// rewritten by a sync starts again at 0, which the Promoter takes as a counter
// restart.
func (k *iptablesKernel) connections(ctx context.Context, _ *service.Snapshot, ports portSet) (map[service.PortName]uint64, error) {
	save, err := k.saveCounters(ctx)
	if err != nil {
		return nil, err
	}
	dnat := dnatCounts(save)
	byName := make(map[string]service.PortName, len(ports))
	for n := range ports {
		byName[n.String()] = n
	}
	out := map[service.PortName]uint64{}
	for _, ps := range k.p.Status() {
		name, ok := byName[ps.Port]
		if !ok {
			continue
		}
		// An endpoint of both the cluster and the local policy is listed
		// twice, with one SVCP-SEP- chain.
		seen := map[string]bool{}
		var n uint64
		for _, ep := range ps.Endpoints {
			if !seen[ep.Chain] {
				seen[ep.Chain] = true
				n += dnat[ep.Chain]
			}
		}
		out[name] = n
	}
	return out, nil
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

// ipvsKernel is hybrid's IPVS path: ipvs mode restricted to the promoted ports.
type ipvsKernel struct {
	*ipvsMode
}

var _ kernelPath = (*ipvsKernel)(nil)

func newIPVSKernel(cfg *Config, ipt kiptables.Interface, log *slog.Logger, carried func(service.PortName) bool) (*ipvsKernel, error) {
	m, err := newIPVS(cfg, ipt, log, carried)
	if err != nil {
		return nil, err
	}
	return &ipvsKernel{ipvsMode: m}, nil
}

// apply is ipvs mode's Sync, which reconciles IPVS before it returns.
func (k *ipvsKernel) apply(ctx context.Context, snap *service.Snapshot) error {
	return k.ipvsMode.Sync(ctx, snap)
}

// connections sums the Connections counters of each port's virtual servers (one
// per service address, one per node address for a NodePort), as offload/ipvs
// computes them.
func (k *ipvsKernel) connections(ctx context.Context, snap *service.Snapshot, ports portSet) (map[service.PortName]uint64, error) {
	all, err := k.p.Connections(ctx, snap)
	if err != nil {
		return nil, err
	}
	out := make(map[service.PortName]uint64, len(ports))
	for name := range ports {
		if _, ok := snap.Port(name); ok {
			out[name] = all[name]
		}
	}
	return out, nil
}
