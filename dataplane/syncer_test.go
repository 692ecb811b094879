package dataplane

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// applier records the Snapshots it is asked to apply and fails the first
// fail times.
type applier struct {
	mu      sync.Mutex
	fail    int
	applied []*service.Snapshot
	calls   chan error
}

func (a *applier) apply(_ context.Context, snap *service.Snapshot) error {
	a.mu.Lock()
	var err error
	if a.fail > 0 {
		a.fail--
		err = errors.New("restore failed")
	} else {
		a.applied = append(a.applied, snap)
	}
	a.mu.Unlock()
	a.calls <- err
	return err
}

// Run syncs nothing before the first Snapshot, retries a failed sync, and
// resyncs the latest Snapshot a Period after a sync ended.
func TestSyncerRun(t *testing.T) {
	a := &applier{fail: 1, calls: make(chan error, 16)}
	s := NewSyncer(SyncerConfig{Mode: "test", Apply: a.apply, Period: 50 * time.Millisecond, RetryAfter: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // the test owns Run's goroutine until cancel
		defer close(done)
		_ = s.Run(ctx)
	}()
	select {
	case err := <-a.calls:
		t.Fatalf("a sync before the first Snapshot: %v", err)
	case <-time.After(200 * time.Millisecond): // four periods: Run is idle
	}
	if err := s.Healthy(); err == nil || !strings.Contains(err.Error(), "first Snapshot") {
		t.Errorf("before the first Snapshot: Healthy() = %v", err)
	}
	snap := service.NewSnapshot(nil, nil)
	if err := s.Sync(ctx, snap); err == nil {
		t.Fatal("first sync: want the injected failure")
	}
	<-a.calls
	if err := s.Healthy(); err == nil {
		t.Error("after a failed sync: healthy")
	}
	if err := <-a.calls; err != nil { // Run's retry
		t.Fatalf("retry: %v", err)
	}
	if err := <-a.calls; err != nil { // a Period later: the resync
		t.Fatalf("resync: %v", err)
	}
	cancel()
	<-done
	if err := s.Healthy(); err != nil {
		t.Errorf("after the retry: %v", err)
	}
	for _, got := range a.applied {
		if got != snap {
			t.Errorf("applied %p, want the Snapshot handed over", got)
		}
	}
}

// /healthz reports what is applied: a Snapshot that waits
// longer than the bound makes the mode unhealthy, however well earlier syncs
// went.
func TestRecordLag(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	r := NewRecord(RecordConfig{Mode: "test", LagBound: time.Minute, Now: func() time.Time { return now }})
	r.Queued()
	r.End(r.Begin(nil), nil)
	if err := r.Healthy(); err != nil {
		t.Fatalf("after a sync: %v", err)
	}
	r.Queued() // handed over, and the sync takes long
	a := r.Begin(nil)
	now = now.Add(30 * time.Second)
	if err := r.Healthy(); err != nil {
		t.Errorf("30s into a sync, bound 1m: %v", err)
	}
	r.Queued() // another one arrives meanwhile
	now = now.Add(31 * time.Second)
	if err := r.Healthy(); err == nil || !strings.Contains(err.Error(), "lag the Snapshot by 1m1s") {
		t.Errorf("61s after the Snapshot was handed over: Healthy() = %v", err)
	}
	r.End(a, nil) // the first is applied; the second has waited 31s, within the bound
	if err := r.Healthy(); err != nil {
		t.Errorf("with only the second Snapshot waiting, 31s: %v", err)
	}
}

// Lag, what /livez answers, is kube-proxy's
// ProxyHealthServer.Health: nothing waits before the first Snapshot, and a
// failed sync counts only once its Snapshot has waited past the bound; the
// other conditions of Healthy (/healthz) do not touch it.
func TestRecordLagOnly(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	r := NewRecord(RecordConfig{Mode: "test", LagBound: time.Minute, Now: func() time.Time { return now }})
	if r.Lag() != nil || r.Healthy() == nil {
		t.Errorf("before the first Snapshot: Lag() = %v (want nil), Healthy() = %v (want an error)", r.Lag(), r.Healthy())
	}
	r.Queued()
	r.End(r.Begin(nil), errors.New("restore failed"))
	now = now.Add(59 * time.Second)
	if r.Lag() != nil || r.Healthy() == nil {
		t.Errorf("a failed sync 59s ago: Lag() = %v (want nil), Healthy() = %v (want an error)", r.Lag(), r.Healthy())
	}
	now = now.Add(2 * time.Second)
	if err := r.Lag(); err == nil || !strings.Contains(err.Error(), "lag the Snapshot by 1m1s") {
		t.Errorf("its Snapshot waited 61s: Lag() = %v", err)
	}
	r.End(r.Begin(nil), nil)
	if r.Lag() != nil || r.Healthy() != nil {
		t.Errorf("after the retry succeeded: Lag() = %v, Healthy() = %v", r.Lag(), r.Healthy())
	}
}

func TestRetryDelay(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 10: 30 * time.Second} {
		if got := retryDelay(n, time.Second, 30*time.Second); got != want {
			t.Errorf("retryDelay(%d) = %v, want %v", n, got, want)
		}
	}
}

// A Snapshot handed over while a sync is in flight is the one the next sync
// applies, whichever asks first: Sync's own, or a Resync of Run's that takes
// the lock before it. Before, a Resync that won the lock applied the old
// Snapshot and the Record counted the new one applied.
func TestSyncerHandoverDuringSync(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var applied []*service.Snapshot
	s := NewSyncer(SyncerConfig{Mode: "test", Apply: func(_ context.Context, snap *service.Snapshot) error {
		mu.Lock()
		first := len(applied) == 0
		applied = append(applied, snap)
		mu.Unlock()
		if first {
			<-release // the first sync is in flight until the test says
		}
		return nil
	}})
	ctx := context.Background()
	old, cur := service.NewSnapshot(nil, nil), service.NewSnapshot(nil, nil)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Sync(ctx, old) })
	for s.Latest() != old {
		time.Sleep(time.Millisecond)
	}
	wg.Go(func() { _ = s.Sync(ctx, cur) })
	for s.Latest() != cur { // handed over, though old's sync holds the lock
		time.Sleep(time.Millisecond)
	}
	wg.Go(func() { _ = s.Resync(ctx) })
	close(release)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(applied) != 3 || applied[0] != old || applied[1] != cur || applied[2] != cur {
		t.Errorf("applied %v, want old, then cur twice (%p, %p)", applied, old, cur)
	}
}
