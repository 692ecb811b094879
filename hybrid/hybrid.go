package hybrid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// Config configures hybrid mode.
type Config struct {
	// Node is the node served, by both paths: hybrid sets the userspace
	// proxier's, and Kernel builds the kernel path for it.
	dataplane.Node
	// Userspace configures the userspace proxier; hybrid sets its Node and
	// its Carries.
	Userspace userspace.Config
	// Kernel builds the kernel path, restricted to the ports carried accepts
	// (it reads hybrid's promoted set, which changes as ports move).
	Kernel func(carried func(service.PortName) bool) (dataplane.KernelPath, error)
	// Promoter decides when a port moves (--promote-conn-rate,
	// --promote-after, --demote-after).
	Promoter PromoterConfig
	// SampleEvery is how often the counters are read; if zero, SampleEvery of
	// the Promoter config.
	SampleEvery time.Duration
	// LagBound is the userspace side's dataplane.Record bound (0: default).
	LagBound time.Duration
	// Logger gets one line per move; nil: slog.Default().
	Logger *slog.Logger
}

// Dataplane is hybrid mode: a dataplane.Interface composing the userspace
// proxier (portals) and one kernel path.
type Dataplane struct {
	cfg      Config
	log      *slog.Logger
	us       *userspace.Proxier
	record   *dataplane.Record // the userspace side's syncs
	kernel   dataplane.KernelPath
	promoter *Promoter
	every    time.Duration

	// inKernel are the ports the kernel path carries, noPortal the ports the
	// userspace proxier renders no portal for. The paths read them from their
	// own goroutines: each is replaced whole, never changed in place.
	inKernel atomic.Pointer[dataplane.PortSet]
	noPortal atomic.Pointer[dataplane.PortSet]
	// pins are the ports of the latest Snapshot that KernelFromStart places.
	pins atomic.Pointer[dataplane.PortSet]

	promotions, demotions atomic.Uint64

	mu       sync.Mutex // one Sync or sampling step at a time
	snap     *service.Snapshot
	countErr string // the last failure to read the kernel's counters, logged once
}

// KernelFromStart reports whether a service port takes the kernel path from
// the moment hybrid sees it, whatever its traffic, and stays there while it
// holds: a TCP or UDP port (those hybrid moves at all) of a Service with
// externalTrafficPolicy Local that is reached from outside (a node port,
// external IPs, load-balancer IPs). That policy
// exists to keep the client's address, which the userspace proxier cannot
// keep: it opens its own connection to the endpoint, from the node. Every
// other port starts in userspace and moves when the Promoter says so. When
// the Service's policy changes back to Cluster, the port is the Promoter's
// again: it stays in the kernel until it has been quiet for DemoteAfter.
func KernelFromStart(p *service.Port) bool {
	return (p.Protocol == service.TCP || p.Protocol == service.UDP) && p.Service.ExternalPolicyLocal && p.ExternallyAccessible()
}

var _ dataplane.Interface = (*Dataplane)(nil)

// SampleEvery is how often hybrid reads the counters: every second (IPVS's own
// rate estimator samples every 2s), more often when PromoteAfter or
// DemoteAfter ask for a decision within two seconds, so that the rate is
// sampled at least twice within them; never more than 10 times a second.
func SampleEvery(cfg PromoterConfig) time.Duration {
	every := time.Second
	for _, d := range []time.Duration{cfg.PromoteAfter, cfg.DemoteAfter} {
		if d > 0 && d/2 < every {
			every = d / 2
		}
	}
	return max(every, 100*time.Millisecond)
}

// New builds hybrid mode: the userspace proxier, the Promoter and the kernel
// path.
func New(cfg Config) (*Dataplane, error) {
	if err := cfg.Node.Check(); err != nil {
		return nil, fmt.Errorf("hybrid config: %w", err)
	}
	promoter, err := NewPromoter(cfg.Promoter)
	if err != nil {
		return nil, err
	}
	if cfg.Kernel == nil {
		return nil, errors.New("hybrid: no kernel path")
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = SampleEvery(cfg.Promoter)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Dataplane{cfg: cfg, log: cfg.Logger.With("component", "hybrid"), promoter: promoter, every: cfg.SampleEvery,
		record: dataplane.NewRecord(dataplane.RecordConfig{Mode: dataplane.ModeHybrid, LagBound: cfg.LagBound})}
	m.inKernel.Store(&dataplane.PortSet{})
	m.noPortal.Store(&dataplane.PortSet{})
	m.pins.Store(&dataplane.PortSet{})
	uc := cfg.Userspace
	uc.Node = cfg.Node
	uc.Carries = func(n service.PortName) bool { return !(*m.noPortal.Load())[n] }
	m.us = userspace.NewProxier(uc)
	m.kernel, err = cfg.Kernel(func(n service.PortName) bool { return (*m.inKernel.Load())[n] })
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Mode implements dataplane.Interface.
func (m *Dataplane) Mode() string { return dataplane.ModeHybrid }

// Sync serves snap on both paths: the userspace side first (listeners and
// portals for every port in userspace), then the kernel path. Ports that are
// gone are forgotten: if they come back, they start in userspace.
func (m *Dataplane) Sync(ctx context.Context, snap *service.Snapshot) error {
	m.record.Queued()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snap = snap
	exists := func(n service.PortName) bool { _, ok := snap.Port(n); return ok }
	m.promoter.Retain(exists)
	for _, set := range []*atomic.Pointer[dataplane.PortSet]{&m.inKernel, &m.noPortal} {
		next := dataplane.PortSet{}
		for n := range *set.Load() {
			if exists(n) {
				next[n] = true
			}
		}
		set.Store(&next)
	}
	// Ports placed in the kernel from the start go there in a promotion's
	// order: the kernel path first (this Sync's), then the portal.
	pinSet := dataplane.PortSet{}
	for _, p := range snap.Ports() {
		if KernelFromStart(p) {
			pinSet[p.Name] = true
		}
	}
	m.pins.Store(&pinSet)
	pins := m.newPins()
	setIn(&m.inKernel, pins, true)
	a := m.record.Begin(snap)
	errU := m.us.Sync(snap)
	m.record.End(a, nil) // as userspace.Dataplane: failures show in LastError and Status until retried
	errK := m.kernel.Sync(ctx, snap)
	m.pinned(pins, errK)
	return errors.Join(errU, errK)
}

// newPins are the ports KernelFromStart places that are not on the kernel
// path yet, sorted.
func (m *Dataplane) newPins() []service.PortName {
	inKernel := *m.inKernel.Load()
	var out []service.PortName
	for n := range *m.pins.Load() {
		if !inKernel[n] {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b service.PortName) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// pinned finishes placing pins on the kernel path once the kernel path's
// sync (err) has installed them: their portals go. If it failed, they stay
// in userspace, and the next Step tries again.
func (m *Dataplane) pinned(pins []service.PortName, err error) {
	if len(pins) == 0 {
		return
	}
	if err != nil {
		setIn(&m.inKernel, pins, false)
		m.log.Warn("externalTrafficPolicy Local: the kernel path could not be installed, the ports stay in userspace until it can", "ports", portStrings(pins), "err", err)
		return
	}
	setIn(&m.noPortal, pins, true)
	if err := m.us.ApplyPortals(); err != nil {
		m.log.Warn("placed on the kernel path, but the portals stay until a retry removes them", "ports", portStrings(pins), "err", err)
	}
	for _, n := range pins {
		m.promoter.Moved(n, Kernel)
		m.log.Info("service port placed on the kernel path: externalTrafficPolicy Local keeps the client's address", "port", n.String(), "path", m.kernel.Mode())
	}
}

// Run owns the three goroutines of hybrid mode: the userspace proxier, the
// kernel path's resync loop, and the sampler. When ctx ends the userspace
// proxier shuts down (portals removed, open connections given their grace);
// the kernel rules of promoted ports stay, as in the kernel modes, until
// --cleanup or the next start.
func (m *Dataplane) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	var errU, errK error
	wg.Go(func() { errU = m.us.Run(ctx) })
	wg.Go(func() { errK = m.kernel.Run(ctx) })
	wg.Go(func() { m.sample(ctx) })
	wg.Wait()
	return errors.Join(errU, errK)
}

// sample feeds the Promoter every m.every and carries out its moves.
func (m *Dataplane) sample(ctx context.Context) {
	tick := time.NewTicker(m.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.Step(ctx)
		}
	}
}

// Step takes one sample and makes the moves it calls for (Run calls it every
// sample period; tests call it with a fake clock in the Promoter).
func (m *Dataplane) Step(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.snap == nil {
		return
	}
	if pins := m.newPins(); len(pins) > 0 { // a Sync could not place them
		setIn(&m.inKernel, pins, true)
		m.pinned(pins, m.kernel.Sync(ctx, m.snap))
	}
	var up, down []Move
	for _, mv := range m.promoter.Observe(m.counts(ctx)) {
		if mv.To == Kernel {
			up = append(up, mv)
		} else {
			down = append(down, mv)
		}
	}
	if len(up) > 0 {
		m.promote(ctx, up)
	}
	if len(down) > 0 {
		m.demote(ctx, down)
	}
}

// counts returns each port's cumulative new connections on its current path:
// the userspace counter, or the kernel path's for a promoted port. A promoted
// port whose kernel counter cannot be read is left out of this sample, and so
// is a port KernelFromStart places: the Promoter does not move it.
func (m *Dataplane) counts(ctx context.Context) map[service.PortName]uint64 {
	pins := *m.pins.Load()
	inKernel := dataplane.PortSet{}
	for n := range *m.inKernel.Load() {
		if !pins[n] {
			inKernel[n] = true
		}
	}
	out := map[service.PortName]uint64{}
	for name, c := range m.us.Stats() {
		if !inKernel[name] && !pins[name] {
			out[name] = c.ConnectionsOpened
		}
	}
	if len(inKernel) == 0 {
		return out
	}
	kc, err := m.kernel.Connections(ctx, m.snap, inKernel)
	if msg := errString(err); msg != m.countErr {
		m.countErr = msg
		if err != nil {
			m.log.Warn("cannot read the kernel's connection counters: promoted ports are not demoted until it works", "err", err)
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
func (m *Dataplane) promote(ctx context.Context, moves []Move) {
	names := moveNames(moves)
	setIn(&m.inKernel, names, true)
	if err := m.kernel.Sync(ctx, m.snap); err != nil {
		// The portals are untouched: the ports stay in userspace, and the
		// Promoter proposes them again at the next sample.
		setIn(&m.inKernel, names, false)
		m.log.Warn("promotion failed: the kernel path could not be installed, staying in userspace", "ports", portStrings(names), "err", err)
		return
	}
	setIn(&m.noPortal, names, true)
	if err := m.us.ApplyPortals(); err != nil {
		// The kernel path is met first, so the ports are promoted already; the
		// userspace proxier retries removing the portals.
		m.log.Warn("promoted, but the portals stay until a retry removes them", "ports", portStrings(names), "err", err)
	}
	for _, mv := range moves {
		m.promoter.Moved(mv.Port, Kernel)
		m.promotions.Add(1)
		m.log.Info("service port promoted", "port", mv.Port.String(), "path", m.kernel.Mode(),
			"rate", fmt.Sprintf("%.1f/s", mv.Rate), "for", mv.Held.Round(time.Millisecond), "promoteConnRate", m.cfg.Promoter.PromoteConnRate)
	}
}

// demote moves ports back to userspace: the portals first, then the kernel
// path lets them go.
func (m *Dataplane) demote(ctx context.Context, moves []Move) {
	names := moveNames(moves)
	setIn(&m.noPortal, names, false)
	if err := m.us.ApplyPortals(); err != nil {
		setIn(&m.noPortal, names, true)
		m.log.Warn("demotion failed: the portals could not be added, staying in the kernel", "ports", portStrings(names), "err", err)
		return
	}
	setIn(&m.inKernel, names, false)
	if err := m.kernel.Sync(ctx, m.snap); err != nil {
		// The portals are in place; the kernel path keeps new connections
		// until its own retry removes the rules.
		m.log.Warn("demoted, but the kernel rules stay until a retry removes them", "ports", portStrings(names), "err", err)
	}
	for _, mv := range moves {
		m.promoter.Moved(mv.Port, Userspace)
		m.demotions.Add(1)
		m.log.Info("service port demoted", "port", mv.Port.String(), "path", Userspace,
			"rate", fmt.Sprintf("%.1f/s", mv.Rate), "for", mv.Held.Round(time.Millisecond), "demoteAfter", m.cfg.Promoter.DemoteAfter)
	}
}

func moveNames(moves []Move) []service.PortName {
	out := make([]service.PortName, len(moves))
	for i, mv := range moves {
		out[i] = mv.Port
	}
	return out
}

// setIn replaces *set with a copy that has (in) or lacks the names.
func setIn(set *atomic.Pointer[dataplane.PortSet], names []service.PortName, in bool) {
	next := dataplane.PortSet{}
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

// portStrings is names for a log line.
func portStrings(names []service.PortName) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n.String()
	}
	slices.Sort(out)
	return out
}
