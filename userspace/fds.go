package userspace

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// fdBudget bounds the file descriptors that proxied connections and UDP
// sessions hold, so that the process always keeps some for everything else:
// /healthz and /metrics, reading the manifests file, the API server's watch.
// A proxier without a bound takes every descriptor under load (or through an
// endpoint loop), and then the whole process is blind and unreachable.
//
// Each TCP connection takes 2 (the client's socket and the endpoint's), each
// UDP session 1; the listeners and the copy loop's transient splice pipes are
// not counted and live in the reserve.
type fdBudget struct {
	max  int64 // descriptors the connections and sessions may hold
	used atomic.Int64
}

// newFDBudget leaves a reserve of 2% of the file limit (RLIMIT_NOFILE, which
// Go raises to the hard limit at start), at least 64 and at most 512
// descriptors: enough for the HTTP servers and the watch, little enough that
// the connections keep almost all of a small limit.
func newFDBudget() *fdBudget {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<40 {
		return &fdBudget{max: 1 << 40} // no limit we can read: no bound
	}
	reserve := min(max(int64(lim.Cur)/50, 64), 512)
	return &fdBudget{max: max(int64(lim.Cur)-reserve, 0)}
}

// take reserves n descriptors; false means the budget is spent.
func (b *fdBudget) take(n int64) bool {
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *fdBudget) give(n int64) { b.used.Add(-n) }

// isFDExhaustion reports whether err says the process (EMFILE) or the system
// (ENFILE) is out of file descriptors.
func isFDExhaustion(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// fdExhausted counts and logs one refusal for lack of descriptors: a
// connection or session refused because the budget is spent, or a socket
// call that failed with EMFILE or ENFILE.
func (p *Proxier) fdExhausted(what string, err error) {
	p.fdRefusals.Add(1)
	p.fdLog.log(p.cfg.Logger, "out of file descriptors: refusing connections and sessions until some close",
		"refused", what, "err", err, "budget", p.fds.max, "inUse", p.fds.used.Load())
}

// sparseLog logs a recurring condition at most once per interval, with the
// number of occurrences it did not log: when descriptors run out it happens
// for every new connection, and the log must not become the next problem.
type sparseLog struct {
	every time.Duration

	mu      sync.Mutex
	last    time.Time
	skipped int
}

func (s *sparseLog) log(l *slog.Logger, msg string, args ...any) {
	s.mu.Lock()
	now := time.Now()
	if !s.last.IsZero() && now.Sub(s.last) < s.every {
		s.skipped++
		s.mu.Unlock()
		return
	}
	skipped := s.skipped
	s.last, s.skipped = now, 0
	s.mu.Unlock()
	l.Warn(msg, append(args, "notLogged", skipped)...)
}
