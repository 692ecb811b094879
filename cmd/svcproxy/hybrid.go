package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/offload"
	offloadipvs "github.com/svcproxy/svcproxy/offload/ipvs"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// hybridMode is --mode hybrid: every service port starts in userspace; the
// Promoter moves the hot ones to the kernel path (--offload) and the quiet ones
// back, one port at a time, without breaking a connection:
//
//   - promote: the kernel path first (its hooks are met before the portals),
//     then the portal goes;
//   - demote: the portal first, then the kernel path goes.
//
// A connection keeps the NAT decision conntrack recorded when it opened, so one
// that a portal brought to the userspace listener finishes there (the listener
// stays), and one that the kernel DNATed finishes on its endpoint.
type hybridMode struct {
	cfg      *Config
	log      *slog.Logger
	us       *userspace.Proxier
	kernel   kernelPath
	promoter *offload.Promoter
	every    time.Duration // how often counts are sampled

	// inKernel are the ports the kernel path carries, noPortal the ports the
	// userspace proxier renders no portal for. The proxiers read them from
	// their own goroutines: each is replaced whole, never changed in place.
	inKernel atomic.Pointer[portSet]
	noPortal atomic.Pointer[portSet]

	promotions, demotions atomic.Uint64

	mu       sync.Mutex // one Sync or sampling step at a time
	snap     *service.Snapshot
	countErr string // the last failure to read the kernel's counters, logged once
}

// portSet is a set of service ports.
type portSet map[service.PortName]bool

// kernelPath is hybrid's offload dataplane, serving only the ports hybrid
// selects (offload/iptables Config.Include, offload/ipvs Config.Select).
type kernelPath interface {
	dataplane
	// apply makes the kernel carry the selected ports of snap (and nothing
	// else of ours) and returns once it does.
	apply(ctx context.Context, snap *service.Snapshot) error
	// connections returns the cumulative count of new connections of each of
	// ports that the kernel carries: what the Promoter samples once a port is
	// promoted.
	connections(ctx context.Context, snap *service.Snapshot, ports portSet) (map[service.PortName]uint64, error)
}

// sampleEvery is how often hybrid reads the counters: every second (IPVS's own
// rate estimator samples every 2s), more often when --promote-after or
// --demote-after ask for a decision within two seconds, so that the rate is
// sampled at least twice within them; never more than 10 times a second.
func sampleEvery(cfg *Config) time.Duration {
	every := time.Second
	for _, d := range []time.Duration{cfg.PromoteAfter, cfg.DemoteAfter} {
		if d > 0 && d/2 < every {
			every = d / 2
		}
	}
	return max(every, 100*time.Millisecond)
}

func newHybrid(cfg *Config, ipt kiptables.Interface, log *slog.Logger) (*hybridMode, error) {
	promoter, err := offload.NewPromoter(offload.Config{
		PromoteConnRate: cfg.PromoteConnRate,
		PromoteAfter:    cfg.PromoteAfter,
		DemoteAfter:     cfg.DemoteAfter,
	})
	if err != nil {
		return nil, fmt.Errorf("--promote-conn-rate, --promote-after, --demote-after: %w", err)
	}
	pr, err := userspace.ParsePortRange(cfg.ProxyPortRange)
	if err != nil {
		return nil, fmt.Errorf("--proxy-port-range: %w", err)
	}
	h := &hybridMode{cfg: cfg, log: log.With("component", "hybrid"), promoter: promoter, every: sampleEvery(cfg)}
	h.inKernel.Store(&portSet{})
	h.noPortal.Store(&portSet{})
	h.us = userspace.New(userspace.Config{
		PortRange:      pr,
		UDPIdleTimeout: cfg.UDPIdleTimeout,
		ShutdownGrace:  cfg.ShutdownGrace,
		IPTables:       ipt,
		Exclude:        func(n service.PortName) bool { return (*h.noPortal.Load())[n] },
	})
	carried := func(n service.PortName) bool { return (*h.inKernel.Load())[n] }
	kernel := cfg.Offload
	if kernel == modeIPVS {
		if err := offloadipvs.Available(); err != nil {
			// As --mode ipvs does: say why once, and offload to iptables.
			log.Warn("IPVS not available, hybrid mode offloads to iptables instead", "reason", err)
			kernel = modeIPTables
		}
	}
	switch kernel {
	case modeIPVS:
		h.kernel, err = newIPVSKernel(cfg, ipt, log, carried)
	default:
		h.kernel, err = newIPTablesKernel(cfg, ipt, log, carried)
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (h *hybridMode) Mode() string { return modeHybrid }

// Sync serves snap on both paths. Ports that are gone are forgotten: if they
// come back, they start in userspace.
func (h *hybridMode) Sync(ctx context.Context, snap *service.Snapshot) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.snap = snap
	exists := func(n service.PortName) bool { _, ok := snap.Port(n); return ok }
	h.promoter.Retain(exists)
	for _, set := range []*atomic.Pointer[portSet]{&h.inKernel, &h.noPortal} {
		next := portSet{}
		for n := range *set.Load() {
			if exists(n) {
				next[n] = true
			}
		}
		set.Store(&next)
	}
	errK := h.kernel.apply(ctx, snap)
	errU := h.us.Sync(snap)
	return errors.Join(errU, errK)
}

// Run owns the three goroutines of hybrid mode: the userspace proxier, the
// kernel path's resync loop, and the sampler. When ctx ends the userspace
// proxier shuts down (portals removed, open connections given
// --shutdown-grace); the kernel rules of promoted ports stay, as in iptables
// mode, until --cleanup or the next start.
func (h *hybridMode) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	var errU, errK error
	wg.Go(func() { errU = h.us.Run(ctx) })
	wg.Go(func() { errK = h.kernel.Run(ctx) })
	wg.Go(func() { h.sample(ctx) })
	wg.Wait()
	return errors.Join(errU, errK)
}

// sample feeds the Promoter every h.every and carries out its moves.
func (h *hybridMode) sample(ctx context.Context) {
	tick := time.NewTicker(h.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.step(ctx)
		}
	}
}

// step takes one sample and makes the moves it calls for.
func (h *hybridMode) step(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.snap == nil {
		return
	}
	var up, down []offload.Move
	for _, m := range h.promoter.Observe(h.counts(ctx)) {
		if m.To == offload.Kernel {
			up = append(up, m)
		} else {
			down = append(down, m)
		}
	}
	if len(up) > 0 {
		h.promote(ctx, up)
	}
	if len(down) > 0 {
		h.demote(ctx, down)
	}
}

// counts returns each port's cumulative new connections on its current path:
// the userspace counter, or the kernel's for a promoted port. A promoted port
// whose kernel counter cannot be read is left out of this sample.
func (h *hybridMode) counts(ctx context.Context) map[service.PortName]uint64 {
	inKernel := *h.inKernel.Load()
	out := map[service.PortName]uint64{}
	for name, c := range h.us.Stats() {
		if !inKernel[name] {
			out[name] = c.ConnectionsOpened
		}
	}
	if len(inKernel) == 0 {
		return out
	}
	kc, err := h.kernel.connections(ctx, h.snap, inKernel)
	if msg := errString(err); msg != h.countErr {
		h.countErr = msg
		if err != nil {
			h.log.Warn("cannot read the kernel's connection counters: promoted ports are not demoted until it works", "err", err)
		}
	}
	for name := range inKernel {
		if n, ok := kc[name]; ok {
			out[name] = n
		}
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// promote moves ports to the kernel path: the kernel path first, then the
// portals go.
func (h *hybridMode) promote(ctx context.Context, moves []offload.Move) {
	names := moveNames(moves)
	h.setIn(&h.inKernel, names, true)
	if err := h.kernel.apply(ctx, h.snap); err != nil {
		// The portals are untouched: the ports stay in userspace, and the
		// Promoter proposes them again at the next sample.
		h.setIn(&h.inKernel, names, false)
		h.log.Warn("promotion failed: the kernel path could not be installed, staying in userspace", "ports", portStrings(names), "err", err)
		return
	}
	h.setIn(&h.noPortal, names, true)
	if err := h.us.ApplyPortals(); err != nil {
		// The kernel path is met first, so the ports are promoted already; the
		// userspace proxier retries removing the portals.
		h.log.Warn("promoted, but the portals stay until a retry removes them", "ports", portStrings(names), "err", err)
	}
	for _, m := range moves {
		h.promoter.Moved(m.Port, offload.Kernel)
		h.promotions.Add(1)
		h.log.Info("service port promoted", "port", m.Port.String(), "path", h.kernel.Mode(),
			"rate", fmt.Sprintf("%.1f/s", m.Rate), "for", m.Held.Round(time.Millisecond), "promoteConnRate", h.cfg.PromoteConnRate)
	}
}

// demote moves ports back to userspace: the portals first, then the kernel
// path goes.
func (h *hybridMode) demote(ctx context.Context, moves []offload.Move) {
	names := moveNames(moves)
	h.setIn(&h.noPortal, names, false)
	if err := h.us.ApplyPortals(); err != nil {
		h.setIn(&h.noPortal, names, true)
		h.log.Warn("demotion failed: the portals could not be added, staying in the kernel", "ports", portStrings(names), "err", err)
		return
	}
	h.setIn(&h.inKernel, names, false)
	if err := h.kernel.apply(ctx, h.snap); err != nil {
		// The portals are in place; the kernel path keeps new connections
		// until its own retry removes the rules.
		h.log.Warn("demoted, but the kernel rules stay until a retry removes them", "ports", portStrings(names), "err", err)
	}
	for _, m := range moves {
		h.promoter.Moved(m.Port, offload.Userspace)
		h.demotions.Add(1)
		h.log.Info("service port demoted", "port", m.Port.String(), "path", offload.Userspace,
			"rate", fmt.Sprintf("%.1f/s", m.Rate), "for", m.Held.Round(time.Millisecond), "demoteAfter", h.cfg.DemoteAfter)
	}
}

func moveNames(moves []offload.Move) []service.PortName {
	out := make([]service.PortName, len(moves))
	for i, m := range moves {
		out[i] = m.Port
	}
	return out
}

// setIn replaces *set with a copy that has (in) or lacks the names.
func (h *hybridMode) setIn(set *atomic.Pointer[portSet], names []service.PortName, in bool) {
	next := portSet{}
	for n := range *set.Load() {
		next[n] = true
	}
	for _, n := range names {
		if in {
			next[n] = true
		} else {
			delete(next, n)
		}
	}
	set.Store(&next)
}

func (h *hybridMode) Healthy() error {
	var errs []error
	if err := h.us.LastError(); err != nil {
		errs = append(errs, fmt.Errorf("portals: %w", err))
	}
	if err := h.kernel.Healthy(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// hybridPort is one service port in /status.
type hybridPort struct {
	Name string `json:"name"`
	// Path is "userspace", or the kernel path: "iptables" or "ipvs".
	Path  string    `json:"path"`
	Since time.Time `json:"since"`
	// Rate is the new connections per second of the last sampled interval.
	Rate float64 `json:"rate"`
	// Streak is how long the port has been hot (in userspace) or quiet (in
	// the kernel).
	Streak  string `json:"streak"`
	Samples uint64 `json:"samples"`
}

func (h *hybridMode) Status() any {
	var ports []hybridPort
	for _, st := range h.promoter.Status() {
		path := string(st.Path)
		if st.Path == offload.Kernel {
			path = h.kernel.Mode()
		}
		ports = append(ports, hybridPort{Name: st.Name, Path: path, Since: st.Since, Rate: st.Rate,
			Streak: st.Streak.String(), Samples: st.Samples})
	}
	return map[string]any{
		"mode":            modeHybrid,
		"offload":         h.kernel.Mode(),
		"promoteConnRate": h.cfg.PromoteConnRate,
		"promoteAfter":    h.cfg.PromoteAfter.String(),
		"demoteAfter":     h.cfg.DemoteAfter.String(),
		"promotions":      h.promotions.Load(),
		"demotions":       h.demotions.Load(),
		"ports":           ports,
		"userspace":       h.us.Status(),
		"kernel":          h.kernel.Status(),
	}
}

func (h *hybridMode) WriteMetrics(w io.Writer) {
	off := h.kernel.Mode()
	fmt.Fprintf(w, "# HELP svcproxy_hybrid_promotions_total Service ports moved from userspace to the kernel path.\n# TYPE svcproxy_hybrid_promotions_total counter\nsvcproxy_hybrid_promotions_total{offload=%q} %d\n", off, h.promotions.Load())
	fmt.Fprintf(w, "# HELP svcproxy_hybrid_demotions_total Service ports moved from the kernel path back to userspace.\n# TYPE svcproxy_hybrid_demotions_total counter\nsvcproxy_hybrid_demotions_total{offload=%q} %d\n", off, h.demotions.Load())
	st := h.promoter.Status() // sorted by name
	fmt.Fprintf(w, "# HELP svcproxy_hybrid_port_path 1 for the path each service port takes now.\n# TYPE svcproxy_hybrid_port_path gauge\n")
	for _, p := range st {
		path := string(p.Path)
		if p.Path == offload.Kernel {
			path = off
		}
		fmt.Fprintf(w, "svcproxy_hybrid_port_path{service_port=%q,path=%q} 1\n", p.Name, path)
	}
	writeUserspaceMetrics(w, h.us.Stats())
	h.kernel.WriteMetrics(w)
}

// portStrings is names for a log line.
func portStrings(names []service.PortName) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n.String()
	}
	slices.Sort(out)
	return out
}
