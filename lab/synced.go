package lab

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// applyTimeout bounds how long WaitApplied waits for svcproxy: it notices a
// changed file within a second (an inotify event, then a short settle), or at
// its next poll of the file, every 5s, when the event was lost.
const applyTimeout = 30 * time.Second

// The two of kube-proxy's sync metrics, served by svcproxy's /metrics, that
// tell when a change has reached the rules: a Snapshot handed over to be
// synced sets the first; a sync that applied a handed-over Snapshot adds one
// to the second's count.
const (
	metricQueued  = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
	metricApplied = "kubeproxy_network_programming_duration_seconds"
)

// syncState is what svcproxy's /metrics says of its syncs.
type syncState struct {
	queued  time.Time // the last Snapshot handed over
	synced  time.Time // the end of the last successful sync
	applied uint64    // Snapshots applied so far
}

// metricSynced is the end of the last successful sync.
const metricSynced = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"

// reloadedLine is what svcproxy logs when it has read a changed manifests
// file (service/watch); the Snapshot of that file is handed over after it:
// service/watch writes the line before it wakes the loop that hands the
// Snapshot over, so a handover stamped earlier than the line is an older one.
const reloadedLine = `msg="services file reloaded"`

// reloadedAfter returns when svcproxy last logged reading the manifests
// file, if that was at or after since. Snapshots handed over before then
// (svcproxy also hands over unchanged ones, as kube-proxy resyncs) cannot
// hold the change.
func (l *Lab) reloadedAfter(since time.Time) (time.Time, bool) {
	b, err := os.ReadFile(l.logPath("svcproxy"))
	if err != nil {
		return time.Time{}, false
	}
	var last time.Time
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, reloadedLine) || !strings.HasPrefix(line, "time=") {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if t, err := time.Parse(time.RFC3339Nano, stamp); err == nil && !t.Before(since) {
			last = t
		}
	}
	return last, !last.IsZero()
}

// syncCount is how many Snapshots svcproxy has applied so far, for
// WaitApplied.
func (l *Lab) syncCount(ctx context.Context) (uint64, error) {
	st, err := l.syncState(ctx)
	return st.applied, err
}

func (l *Lab) syncState(ctx context.Context) (syncState, error) {
	text, err := l.NodeGet(ctx, "/metrics")
	if err != nil {
		return syncState{}, err
	}
	return parseSyncState(text)
}

// parseSyncState reads svcproxy's /metrics text.
func parseSyncState(text string) (syncState, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return syncState{}, fmt.Errorf("/metrics: %w", err)
	}
	q, a, y := fams[metricQueued], fams[metricApplied], fams[metricSynced]
	if q == nil || a == nil || y == nil {
		return syncState{}, fmt.Errorf("/metrics has no %s or %s", metricQueued, metricApplied)
	}
	// svcproxy runs a dataplane per IP family, each with its metrics
	// (ip_family="IPv4", "IPv6"), one after the other: the lab's Services
	// are IPv4, and only the IPv4 dataplane's sync says they are applied.
	var st syncState
	for _, m := range q.GetMetric() {
		if ipv4(m) {
			sec, frac := math.Modf(m.GetGauge().GetValue())
			st.queued = time.Unix(int64(sec), int64(frac*1e9))
		}
	}
	for _, m := range y.GetMetric() {
		if ipv4(m) {
			sec, frac := math.Modf(m.GetGauge().GetValue())
			st.synced = time.Unix(int64(sec), int64(frac*1e9))
		}
	}
	for _, m := range a.GetMetric() {
		if ipv4(m) {
			st.applied = m.GetHistogram().GetSampleCount()
		}
	}
	return st, nil
}

// ipv4 says whether m is the IPv4 dataplane's: labelled so, or the only one.
func ipv4(m *dto.Metric) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == "ip_family" {
			return l.GetValue() == "IPv4"
		}
	}
	return true
}

// WaitApplied returns once svcproxy has read the manifests file written at
// since (its log says so), has been handed a Snapshot after that read, has
// finished a sync after that handover, and has applied more Snapshots than
// the before its /metrics counted (syncCount). A change that svcproxy
// already holds (the same Snapshot) never arrives: call it only for a change
// of what svcproxy serves.
func (l *Lab) WaitApplied(ctx context.Context, since time.Time, before uint64) error {
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var st syncState // as of the last /metrics read that answered
	var err error
	for {
		now, nowErr := l.syncState(ctx)
		if nowErr == nil {
			st = now
		}
		if ctx.Err() == nil {
			err = nowErr // a read cut short by the deadline says nothing
		}
		reloaded, ok := l.reloadedAfter(since)
		if nowErr == nil && ok && !st.queued.Before(reloaded) && !st.synced.Before(st.queued) && st.applied > before {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("svcproxy did not apply the changed %s within %s: %s%s",
				l.ManifestsPath(), applyTimeout, waitedFor(since, reloaded, ok, st, before, err), l.logTail("svcproxy"))
		case <-tick.C:
		}
	}
}

// waitedFor says which of WaitApplied's conditions did not hold.
func waitedFor(since, reloaded time.Time, ok bool, st syncState, before uint64, err error) string {
	stamp := func(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
	var b strings.Builder
	if ok {
		fmt.Fprintf(&b, "file read at %s", stamp(reloaded))
	} else {
		fmt.Fprintf(&b, "no %s line since the write at %s", reloadedLine, stamp(since))
	}
	fmt.Fprintf(&b, "; last Snapshot handed over at %s, last sync ended at %s, %d applied (%d before the write)",
		stamp(st.queued), stamp(st.synced), st.applied, before)
	if err != nil {
		fmt.Fprintf(&b, "; the last /metrics read failed: %v", err)
	}
	return b.String()
}
