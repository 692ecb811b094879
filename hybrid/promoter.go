package hybrid

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// Path is where a service port's new connections go.
type Path string

// The paths of a service port.
const (
	// Userspace: a REDIRECT portal brings connections to the Go proxy.
	Userspace Path = "userspace"
	// Kernel: iptables DNAT chains or an IPVS virtual server carry them.
	Kernel Path = "kernel"
)

// Clock tells the time. time.Now is the wall clock; tests pass a fake one.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// PromoterConfig configures a Promoter (svcproxy's --promote-conn-rate, --promote-after,
// --demote-after).
type PromoterConfig struct {
	// PromoteConnRate is the rate of new connections (per second) from which a
	// service port is hot. It must be above 0.
	PromoteConnRate float64
	// PromoteAfter is how long the rate must hold before a port is promoted. 0:
	// at the first hot sample.
	PromoteAfter time.Duration
	// DemoteAfter is how long a promoted port must stay below PromoteConnRate
	// before it goes back to userspace. 0: never.
	DemoteAfter time.Duration
	// Clock is read at each Observe. If nil, the wall clock.
	Clock Clock
}

// Move is a decision: Port should now take Path To.
type Move struct {
	Port service.PortName
	To   Path
	// Rate is the average new-connection rate (per second) over Held, the time
	// the condition held: what caused the move.
	Rate float64
	Held time.Duration
}

func (m Move) String() string {
	return fmt.Sprintf("%s -> %s (%.1f conn/s for %s)", m.Port, m.To, m.Rate, m.Held)
}

// PortStatus is what the Promoter knows of one service port, for /status.
type PortStatus struct {
	Port  service.PortName `json:"-"`
	Name  string           `json:"name"`
	Path  Path             `json:"path"`
	Since time.Time        `json:"since"` // on this path since (first seen, or the last Moved)
	// Rate is the new-connection rate of the last sampled interval.
	Rate float64 `json:"rate"`
	// Streak is how long the port has been hot (in userspace) or quiet (in the
	// kernel) so far; 0 when it is neither.
	Streak time.Duration `json:"streak"`
	// Samples counts the observations of the port.
	Samples uint64 `json:"samples"`
}

// Promoter decides each service port's path from its connection counts over time.
// It is safe for concurrent use.
type Promoter struct {
	cfg PromoterConfig

	mu    sync.Mutex
	ports map[service.PortName]*portState
}

// portState is one port's record.
type portState struct {
	path  Path
	since time.Time

	// last is the previous sample: when, and the cumulative count then. Zero
	// until the first sample on the current path (a baseline).
	lastAt    time.Time
	lastCount uint64
	rate      float64
	samples   uint64

	// The current streak (hot in userspace, quiet in the kernel): it began at
	// the start of its first interval and has seen conns new connections.
	streakFrom time.Time // zero: no streak
	streakTo   time.Time // the latest sample of the streak
	conns      uint64
}

// NewPromoter checks cfg and returns a Promoter that knows no port yet.
func NewPromoter(cfg PromoterConfig) (*Promoter, error) {
	var errs []error
	if !(cfg.PromoteConnRate > 0) {
		errs = append(errs, fmt.Errorf("promoter config: PromoteConnRate %v: must be above 0", cfg.PromoteConnRate))
	}
	if cfg.PromoteAfter < 0 {
		errs = append(errs, fmt.Errorf("promoter config: PromoteAfter %s: must not be negative", cfg.PromoteAfter))
	}
	if cfg.DemoteAfter < 0 {
		errs = append(errs, fmt.Errorf("promoter config: DemoteAfter %s: must not be negative", cfg.DemoteAfter))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	return &Promoter{cfg: cfg, ports: map[service.PortName]*portState{}}, nil
}

// Observe records a sample: for each port in counts, its cumulative count of new
// connections on its current path (a port seen for the first time is in
// Userspace). A port missing from counts keeps its state; its next interval is just
// longer. A count lower than the previous one is a counter that restarted (chains
// rewritten, listener re-created): the whole count is new connections, as in
// Prometheus' rate().
//
// It returns the moves due now, sorted by port. They take effect when the caller
// confirms them with Moved; until then each later Observe proposes them again.
func (p *Promoter) Observe(counts map[service.PortName]uint64) []Move {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Clock.Now()
	var moves []Move
	for name, count := range counts {
		st := p.ports[name]
		if st == nil {
			st = &portState{path: Userspace, since: now}
			p.ports[name] = st
		}
		if m, ok := p.observe(st, now, count); ok {
			m.Port = name
			moves = append(moves, m)
		}
	}
	slices.SortFunc(moves, func(a, b Move) int { return strings.Compare(a.Port.String(), b.Port.String()) })
	return moves
}

// observe adds one sample to st and says whether st's port should move.
func (p *Promoter) observe(st *portState, now time.Time, count uint64) (Move, bool) {
	st.samples++
	if st.lastAt.IsZero() {
		st.lastAt, st.lastCount = now, count // a baseline: no interval yet
		return Move{}, false
	}
	if !now.After(st.lastAt) {
		return Move{}, false // no time has passed: no rate; the next sample covers it
	}
	delta := count - st.lastCount
	if count < st.lastCount {
		delta = count // the counter restarted
	}
	st.rate = float64(delta) / now.Sub(st.lastAt).Seconds()
	hot := st.rate >= p.cfg.PromoteConnRate
	if hot == (st.path == Userspace) { // hot in userspace, or quiet in the kernel
		if st.streakFrom.IsZero() {
			st.streakFrom, st.conns = st.lastAt, 0
		}
		st.streakTo = now
		st.conns += delta
	} else {
		st.streakFrom, st.conns = time.Time{}, 0
	}
	st.lastAt, st.lastCount = now, count
	if st.streakFrom.IsZero() {
		return Move{}, false
	}
	held := now.Sub(st.streakFrom)
	m := Move{To: Kernel, Rate: float64(st.conns) / held.Seconds(), Held: held}
	switch {
	case st.path == Userspace && held >= p.cfg.PromoteAfter:
		return m, true
	case st.path == Kernel && p.cfg.DemoteAfter > 0 && held >= p.cfg.DemoteAfter:
		m.To = Userspace
		return m, true
	}
	return Move{}, false
}

// Moved records that port now takes path to. Its counts start over: the next
// sample is the baseline of the new path's counter.
func (p *Promoter) Moved(port service.PortName, to Path) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ports[port] = &portState{path: to, since: p.cfg.Clock.Now()}
}

// Path returns port's path: Userspace for a port it does not know.
func (p *Promoter) Path(port service.PortName) Path {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.ports[port]; st != nil {
		return st.path
	}
	return Userspace
}

// Retain forgets the ports for which keep is false (their Service is gone): a port
// of that name that comes back starts in userspace.
func (p *Promoter) Retain(keep func(service.PortName) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.ports {
		if !keep(name) {
			delete(p.ports, name)
		}
	}
}

// Status returns every known port, sorted by name.
func (p *Promoter) Status() []PortStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PortStatus, 0, len(p.ports))
	for name, st := range p.ports {
		ps := PortStatus{Port: name, Name: name.String(), Path: st.path, Since: st.since, Rate: st.rate, Samples: st.samples}
		if !st.streakFrom.IsZero() {
			ps.Streak = st.streakTo.Sub(st.streakFrom)
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b PortStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}
