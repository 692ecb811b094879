package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/kernel/ipset"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/kernel/link"
	offloadipvs "github.com/svcproxy/svcproxy/offload/ipvs"
	"github.com/svcproxy/svcproxy/service"
)

// ipvsMode is --mode ipvs: a virtual server per service address and port, the
// addresses held by a dummy interface.
type ipvsMode struct {
	p    *offloadipvs.Proxier
	ipvs kipvs.Interface
	log  *slog.Logger
	sync time.Duration

	mu    sync.Mutex
	last  *service.Snapshot
	err   error
	syncs uint64
	fails uint64
	kick  chan struct{}
}

// newIPVS builds ipvs mode; carried, if not nil, restricts it to some ports
// (hybrid mode's promoted ones).
func newIPVS(cfg *Config, ipt kiptables.Interface, log *slog.Logger, carried func(service.PortName) bool) (*ipvsMode, error) {
	k, err := kipvs.New()
	if err != nil {
		return nil, fmt.Errorf("ipvs: %w", err)
	}
	links, err := link.New()
	if err != nil {
		return nil, fmt.Errorf("links: %w", err)
	}
	nodeIPs, err := nodeAddresses(cfg)
	if err != nil {
		return nil, err
	}
	// Masquerade needs both: a few nat rules that match ip sets of the services.
	sets, err := ipset.New()
	if err != nil {
		return nil, err
	}
	p, err := offloadipvs.New(offloadipvs.Config{
		IPVS:          k,
		Links:         links,
		Scheduler:     cfg.IPVSScheduler,
		NodeName:      cfg.NodeName,
		NodeIPs:       nodeIPs,
		IPTables:      ipt,
		IPSets:        sets,
		ClusterCIDR:   cfg.ClusterCIDR,
		MasqueradeAll: cfg.MasqueradeAll,
		Sysctls:       link.ProcSys{},
		StrictARP:     cfg.IPVSStrictARP,
		Select:        carried,
	})
	if err != nil {
		return nil, err
	}
	return &ipvsMode{p: p, ipvs: k, log: log, sync: cfg.SyncPeriod, kick: make(chan struct{}, 1)}, nil
}

func (m *ipvsMode) Mode() string { return modeIPVS }

func (m *ipvsMode) Sync(ctx context.Context, snap *service.Snapshot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = snap
	return m.syncLocked(ctx)
}

func (m *ipvsMode) syncLocked(ctx context.Context) error {
	m.syncs++
	m.err = m.p.Sync(ctx, m.last)
	if m.err != nil {
		m.fails++
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
	return m.err
}

// Run resyncs: after a failure (with backoff), while real servers drain (a
// drain ends only at a sync), and every sync period.
func (m *ipvsMode) Run(ctx context.Context) error {
	backoff := time.Second
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastFull := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.kick:
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			backoff = min(2*backoff, 30*time.Second)
		case <-tick.C:
			if m.p.Draining() == 0 && time.Since(lastFull) < m.sync {
				continue
			}
		}
		m.mu.Lock()
		if m.last != nil {
			if m.syncLocked(ctx) == nil {
				backoff = time.Second
			}
			lastFull = time.Now()
		}
		m.mu.Unlock()
	}
}

func (m *ipvsMode) Healthy() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

func (m *ipvsMode) Status() any {
	table, err := kipvs.List(context.Background(), m.ipvs)
	if err != nil {
		table = "error: " + err.Error()
	}
	return map[string]any{"mode": modeIPVS, "ipvs": table, "draining": m.p.Draining()}
}

func (m *ipvsMode) WriteMetrics(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintf(w, "# HELP svcproxy_sync_total Syncs of the kernel dataplane.\n# TYPE svcproxy_sync_total counter\nsvcproxy_sync_total{mode=\"ipvs\"} %d\n", m.syncs)
	fmt.Fprintf(w, "# HELP svcproxy_sync_failures_total Syncs that failed (retried with backoff).\n# TYPE svcproxy_sync_failures_total counter\nsvcproxy_sync_failures_total{mode=\"ipvs\"} %d\n", m.fails)
	fmt.Fprintf(w, "# HELP svcproxy_ipvs_draining_real_servers Removed real servers still draining.\n# TYPE svcproxy_ipvs_draining_real_servers gauge\nsvcproxy_ipvs_draining_real_servers %d\n", m.p.Draining())
}

// cleanupIPVS removes svcproxy's virtual servers, dummy interface, masquerade
// rules and ip sets. Without the ipset tool there can be none of the last two.
func cleanupIPVS(ctx context.Context, ipt kiptables.Interface) error {
	k, err := kipvs.New()
	if err != nil {
		return err
	}
	defer k.Close()
	links, err := link.New()
	if err != nil {
		return err
	}
	defer links.Close()
	cfg := offloadipvs.Config{IPVS: k, Links: links}
	if sets, err := ipset.New(); err == nil {
		cfg.IPTables, cfg.IPSets = ipt, sets
	}
	p, err := offloadipvs.New(cfg)
	if err != nil {
		return err
	}
	return p.Cleanup(ctx)
}

// nodeAddresses returns --node-ip, or every address of this namespace's
// interfaces except loopback and svcproxy's own dummy interface: the addresses
// NodePorts answer on.
func nodeAddresses(cfg *Config) ([]netip.Addr, error) {
	if len(cfg.NodeIPs) > 0 {
		return cfg.NodeIPs, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("node addresses: %w", err)
	}
	var out []netip.Addr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 || ifc.Name == offloadipvs.DefaultInterface {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().IsGlobalUnicast() {
				out = append(out, p.Addr())
			}
		}
	}
	return out, nil
}
