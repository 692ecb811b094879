package kernelsync

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/service"
)

// The sync FullSyncPeriod after the last full one, through the Syncer as a
// path runs it: the changes are written first, as a partial sync, then the
// full sync, in one Apply; the Snapshot's programming latencies end when
// the changes are in the kernel, not when the full sync ends.
func TestDataplaneChangesBeforeFullSync(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &mode{onWrite: func(full bool) { // a partial write takes 0.1s, a full one 2s
		now = now.Add(map[bool]time.Duration{false: 100 * time.Millisecond, true: 2 * time.Second}[full])
	}}
	p := &path{m: m}
	d := NewDataplane[*port]("test", Metrics{}, Periods{FullSyncPeriod: time.Minute, Now: func() time.Time { return now }}, "",
		func(ctx context.Context, snap *service.Snapshot) error {
			p.Update(snap)
			return p.sync(ctx)
		})
	p.Ledger = d.Ledger
	ctx := context.Background()
	if err := d.Sync(ctx, udpService("198.19.1.2:53", "198.19.1.3:53")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	changed := udpService("198.19.1.2:53") // an endpoint leaves: its slice's trigger is now
	changed.Services()[0].Triggers = []service.Trigger{{Slice: "dns-abcde", Family: service.IPv4, At: now}}
	if err := d.Sync(ctx, changed); err != nil {
		t.Fatal(err)
	}
	if want := []string{"full", "partial", "full"}; !slices.Equal(m.writes, want) {
		t.Errorf("writes %v, want %v", m.writes, want)
	}
	if h := d.Ledger.Health(); h.FullSyncs != 2 || h.PartialSyncs != 1 {
		t.Errorf("health %+v: want 2 full syncs and the partial one between", h)
	}
	// Both latencies: one sample each for the second Sync (the first had no
	// trigger; its handover sample is 2s), at the partial write's 0.1s.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(d.Syncer) // its Record: kube-proxy's sync metrics
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		name  string
		count uint64
		sum   float64
	}{
		{"kubeproxy_network_programming_duration_seconds", 1, 0.1},
		{"svcproxy_snapshot_programming_duration_seconds", 2, 2 + 0.1},
		{"kubeproxy_sync_proxy_rules_duration_seconds", 2, 2 + 2.1}, // the whole Apply
	} {
		found := false
		for _, mf := range families {
			if mf.GetName() != want.name {
				continue
			}
			found = true
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != want.count || !approx(h.GetSampleSum(), want.sum) {
				t.Errorf("%s: %d samples, sum %gs; want %d, %gs", want.name, h.GetSampleCount(), h.GetSampleSum(), want.count, want.sum)
			}
		}
		if !found {
			t.Errorf("no %s", want.name)
		}
	}
}

func approx(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
