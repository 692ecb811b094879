package nftables

import (
	"context"
	"time"
)

// Run syncs until ctx is done: after each Update (at most once per
// MinSyncPeriod), every SyncPeriod (a full sync), and after a failure with
// exponential backoff. The caller owns the goroutine Run runs on; Run returns
// when ctx is cancelled, leaving the rules in place (they outlive the process;
// Cleanup removes them).
func (p *Proxier) Run(ctx context.Context) {
	failures := 0
	var last time.Time
	for {
		// Coalesce bursts of updates (kube-proxy's BoundedFrequencyRunner).
		if wait := p.cfg.MinSyncPeriod - time.Since(last); !last.IsZero() && wait > 0 {
			if !sleep(ctx, wait) {
				return
			}
		}
		last = time.Now()
		err := p.Sync(ctx)
		if ctx.Err() != nil {
			return
		}
		next := p.cfg.SyncPeriod
		if err != nil {
			failures++
			next = retryDelay(failures, p.cfg.RetryAfter, p.cfg.SyncPeriod)
		} else {
			failures = 0
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.trigger:
		case <-t.C:
		}
		t.Stop()
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

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
