package dataplane

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/service"
)

// SyncerConfig configures a Syncer. Zero durations take kube-proxy's defaults.
type SyncerConfig struct {
	// Mode names the mode in metrics and errors.
	Mode string
	// Apply makes the kernel carry snap; it is called with one Snapshot at a
	// time, never nil.
	Apply func(ctx context.Context, snap *service.Snapshot) error
	// Period is how long after the end of a sync Run syncs again without a
	// change (kube-proxy --sync-period; default 30s). Counting from the end,
	// not the start, a sync that takes longer than Period still leaves the
	// next one room (a full resync does not follow another back to back).
	Period time.Duration
	// RetryAfter is the first delay after a failed sync; it doubles with each
	// further failure up to Period (default 1s).
	RetryAfter time.Duration
	// Pending, if not nil, asks for a resync every PendingEvery while it
	// returns true: IPVS finishes draining real servers only at a sync.
	Pending      func() bool
	PendingEvery time.Duration // default 1s
	// LagBound is Record's (default: twice Period, as kube-proxy's healthz).
	LagBound time.Duration
	// NodeName is Record's.
	NodeName string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Syncer is the lifecycle a kernel mode shares with the others: Sync applies
// the latest Snapshot now, one sync at a time; Run retries a failed sync with
// backoff and resyncs every Period from the end of the last sync. Nothing is
// synced before the first Snapshot: a new process does not replace the rules
// an old one left with an empty rule set while its sources are still listing.
type Syncer struct {
	cfg    SyncerConfig
	record *Record
	ended  chan error // a sync ended (latest wins): Run re-arms its timer

	mu      sync.Mutex // one sync at a time
	attempt *Attempt   // the sync under way (guarded by mu, which Apply runs under)

	latestMu sync.Mutex // guards snap; held only to hand over or take it
	snap     *service.Snapshot
}

// NewSyncer fills in cfg's defaults.
func NewSyncer(cfg SyncerConfig) *Syncer {
	if cfg.Period <= 0 {
		cfg.Period = 30 * time.Second
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.PendingEvery <= 0 {
		cfg.PendingEvery = time.Second
	}
	if cfg.LagBound <= 0 {
		cfg.LagBound = 2 * cfg.Period
	}
	return &Syncer{
		cfg:    cfg,
		record: NewRecord(RecordConfig{Mode: cfg.Mode, LagBound: cfg.LagBound, NodeName: cfg.NodeName, Now: cfg.Now}),
		ended:  make(chan error, 1),
	}
}

// Sync makes snap the state to serve and applies it now. snap is handed over
// before Sync waits for a sync in flight to end: whichever sync starts next,
// this one or a Resync of Run's, applies snap, and the Record counts it
// applied only then.
func (s *Syncer) Sync(ctx context.Context, snap *service.Snapshot) error {
	s.latestMu.Lock()
	s.snap = snap
	s.record.Queued()
	s.latestMu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncLocked(ctx)
}

// Resync applies the latest Snapshot again; before the first one it does
// nothing.
func (s *Syncer) Resync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Latest() == nil {
		return nil
	}
	return s.syncLocked(ctx)
}

// Latest is the Snapshot last handed to Sync; nil before the first.
func (s *Syncer) Latest() *service.Snapshot {
	s.latestMu.Lock()
	defer s.latestMu.Unlock()
	return s.snap
}

func (s *Syncer) syncLocked(ctx context.Context) error {
	s.latestMu.Lock()
	snap := s.snap
	a := s.record.Begin(snap) // the Record's pending handovers are snap's
	s.latestMu.Unlock()
	s.attempt = &a
	err := s.cfg.Apply(ctx, snap)
	s.attempt = nil
	s.record.End(a, err)
	select { // replace an end Run has not seen yet
	case <-s.ended:
	default:
	}
	s.ended <- err
	return err
}

// Programmed is for Apply to call when the kernel carries the Snapshot it
// was given and it still has work to do that changes nothing served (a
// periodic full sync after the changes it carries: offload/kernelsync): the
// programming latencies of the Snapshot's changes end now, not when Apply
// returns. Only Apply may call it: it reads the sync under way.
func (s *Syncer) Programmed() {
	if s.attempt != nil {
		s.record.Programmed(s.attempt)
	}
}

// Run resyncs until ctx ends: RetryAfter (doubling, at most Period) after a
// failed sync, Period after a successful one, and every PendingEvery while
// Pending says so. It returns nil when ctx ends, leaving the rules in place.
func (s *Syncer) Run(ctx context.Context) error {
	next := time.NewTimer(0)
	next.Stop() // armed by the first sync's end: nothing before the first Snapshot
	defer next.Stop()
	var pending <-chan time.Time
	if s.cfg.Pending != nil {
		t := time.NewTicker(s.cfg.PendingEvery)
		defer t.Stop()
		pending = t.C
	}
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-s.ended:
			if err != nil {
				failures++
				next.Reset(retryDelay(failures, s.cfg.RetryAfter, s.cfg.Period))
			} else {
				failures = 0
				next.Reset(s.cfg.Period)
			}
		case <-next.C:
			_ = s.Resync(ctx) // its end re-arms next
		case <-pending:
			if s.cfg.Pending() {
				_ = s.Resync(ctx)
			}
		}
	}
}

// retryDelay is the wait after the n-th consecutive failure: first, doubled per
// failure, at most max.
func retryDelay(n int, first, max time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// Mode is SyncerConfig.Mode.
func (s *Syncer) Mode() string { return s.cfg.Mode }

// Healthy is the Record's answer, named by the mode
// ("iptables: last sync failed ...").
func (s *Syncer) Healthy() error {
	if err := s.record.Healthy(); err != nil {
		return fmt.Errorf("%s: %w", s.cfg.Mode, err)
	}
	return nil
}

// Lag is the Record's, named by the mode.
func (s *Syncer) Lag() error {
	if err := s.record.Lag(); err != nil {
		return fmt.Errorf("%s: %w", s.cfg.Mode, err)
	}
	return nil
}

// Describe implements prometheus.Collector: the Record's metrics.
func (s *Syncer) Describe(ch chan<- *prometheus.Desc) { s.record.Describe(ch) }

// Collect implements prometheus.Collector.
func (s *Syncer) Collect(ch chan<- prometheus.Metric) { s.record.Collect(ch) }
