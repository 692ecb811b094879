package cluster

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
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

// The two sync metrics, served by svcproxy's /metrics, that tell when a
// change has reached the rules: a Snapshot handed over to be synced sets the
// first (kube-proxy's); a sync that applied a handed-over Snapshot adds one
// to the second's count (svcproxy's own: kube-proxy's
// network_programming_duration_seconds counts EndpointSlice changes instead).
const (
	metricQueued  = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
	metricApplied = "svcproxy_snapshot_programming_duration_seconds"
)

// syncState is what svcproxy's /metrics says of its syncs, per IP family:
// svcproxy runs a dataplane per family, each with its metrics labelled
// ip_family="IPv4" or "IPv6" (the key; "" for a svcproxy that serves one
// family and labels nothing). Every Snapshot is handed to each family's
// dataplane in turn, IPv4 first, so a change is applied when every family
// says so: the lab's web-dual has endpoints in both.
type syncState map[string]familySync

// familySync is one family's part of syncState.
type familySync struct {
	queued  time.Time // the last Snapshot handed over
	synced  time.Time // the end of the last successful sync
	applied uint64    // Snapshots applied so far
	// process is when the svcproxy that answered started
	// (process_start_time_seconds): two reads with different ones are of
	// two processes, whose counts are not comparable.
	process float64
}

// metricProcessStart is client_golang's process collector's start time.
const metricProcessStart = "process_start_time_seconds"

// metricSynced is the end of the last successful sync.
const metricSynced = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"

// reloadedLine is what svcproxy logs when it has read a changed manifests
// file (service/watch); the Snapshot of that file is handed over after it:
// service/watch writes the line before it wakes the loop that hands the
// Snapshot over, so a handover stamped earlier than the line is an older one.
const reloadedLine = `msg="services file reloaded"`

// startingLine is what svcproxy logs when it starts, before it reads the
// manifests file for the first time: a svcproxy that logged it after the
// file was written (`svclab mode` restarted it) read the changed file.
const startingLine = `msg="svcproxy starting"`

// readAfter returns when svcproxy last logged reading the manifests file
// (a reload, or its start), if that was at or after since. Snapshots handed
// over before then (svcproxy also hands over unchanged ones, as kube-proxy
// resyncs) cannot hold the change.
func (d *Daemons) readAfter(since time.Time) (time.Time, bool) {
	b, err := os.ReadFile(d.net.LogPath("svcproxy"))
	if err != nil {
		return time.Time{}, false
	}
	return lastLogged(string(b), since)
}

// lastLogged is the time of the last reload or start line of log at or
// after since.
func lastLogged(log string, since time.Time) (time.Time, bool) {
	var last time.Time
	for _, line := range strings.Split(log, "\n") {
		if !(strings.Contains(line, reloadedLine) || strings.Contains(line, startingLine)) || !strings.HasPrefix(line, "time=") {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if t, err := time.Parse(time.RFC3339Nano, stamp); err == nil && !t.Before(since) {
			last = t
		}
	}
	return last, !last.IsZero()
}

// syncStateWhenUp is syncState once svcproxy answers: while `svclab mode`
// restarts it (from another terminal, or a control of `svclab web`), its
// /metrics do not answer for a moment. It gives up after applyTimeout.
func (d *Daemons) syncStateWhenUp(ctx context.Context) (syncState, error) {
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	for {
		st, err := d.syncState(ctx)
		if err == nil {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("svcproxy's metrics did not answer within %s: %w", applyTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (d *Daemons) syncState(ctx context.Context) (syncState, error) {
	text, err := d.NodeGet(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	return parseSyncState(text)
}

// parseSyncState reads svcproxy's /metrics text.
func parseSyncState(text string) (syncState, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	q, a, y := fams[metricQueued], fams[metricApplied], fams[metricSynced]
	if q == nil || a == nil || y == nil {
		return nil, fmt.Errorf("/metrics has no %s, %s or %s", metricQueued, metricApplied, metricSynced)
	}
	var process float64
	if ps := fams[metricProcessStart]; ps != nil && len(ps.GetMetric()) > 0 {
		process = ps.GetMetric()[0].GetGauge().GetValue()
	}
	st := syncState{}
	defer func() {
		for fam, f := range st {
			f.process = process
			st[fam] = f
		}
	}()
	for _, m := range q.GetMetric() {
		f := st[family(m)]
		f.queued = unixSeconds(m.GetGauge().GetValue())
		st[family(m)] = f
	}
	for _, m := range y.GetMetric() {
		f := st[family(m)]
		f.synced = unixSeconds(m.GetGauge().GetValue())
		st[family(m)] = f
	}
	for _, m := range a.GetMetric() {
		f := st[family(m)]
		f.applied = m.GetHistogram().GetSampleCount()
		st[family(m)] = f
	}
	return st, nil
}

func unixSeconds(v float64) time.Time {
	sec, frac := math.Modf(v)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// family is m's ip_family label, "" when it has none.
func family(m *dto.Metric) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == "ip_family" {
			return l.GetValue()
		}
	}
	return ""
}

// appliedAfter says whether every family of st has applied a Snapshot handed
// over at or after read, more Snapshots than before counted. A svcproxy
// that restarted since before (`svclab mode`) counts from zero again.
func (st syncState) appliedAfter(read time.Time, before syncState) bool {
	for fam, f := range st {
		base := before[fam].applied
		if f.process != before[fam].process {
			base = 0
		}
		if f.queued.Before(read) || f.synced.Before(f.queued) || f.applied <= base {
			return false
		}
	}
	return len(st) > 0
}

// WaitApplied returns once svcproxy has read the manifests file written at
// since (its log says so: a reload, or its start), has been handed a
// Snapshot after that read, has finished a sync after that handover, and
// has applied more Snapshots than before counted (its /metrics read before
// the write; from zero when svcproxy has restarted since), in every IP
// family. A svcproxy that stops and starts in the middle (`svclab mode`
// from another terminal) is waited for: its /metrics do not answer for a
// moment, and the svcproxy that starts reads the file anew. A change that
// svcproxy already holds (the same Snapshot) never arrives: call it only
// for a change of what svcproxy serves.
func (d *Daemons) WaitApplied(ctx context.Context, since time.Time, before syncState) error {
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var st syncState // as of the last /metrics read that answered
	var err error
	for {
		now, nowErr := d.syncState(ctx)
		if nowErr == nil {
			st = now
		}
		if ctx.Err() == nil {
			err = nowErr // a read cut short by the deadline says nothing
		}
		reloaded, ok := d.readAfter(since)
		if nowErr == nil && ok && st.appliedAfter(reloaded, before) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("svcproxy did not apply the changed %s within %s: %s%s",
				d.c.ManifestsPath(), applyTimeout, waitedFor(since, reloaded, ok, st, before, err), d.net.LogTail("svcproxy"))
		case <-tick.C:
		}
	}
}

// waitedFor says which of WaitApplied's conditions did not hold.
func waitedFor(since, reloaded time.Time, ok bool, st, before syncState, err error) string {
	stamp := func(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
	var b strings.Builder
	if ok {
		fmt.Fprintf(&b, "file read at %s", stamp(reloaded))
	} else {
		fmt.Fprintf(&b, "no %s or %s line since the write at %s", reloadedLine, startingLine, stamp(since))
	}
	for _, fam := range slices.Sorted(maps.Keys(st)) {
		f := st[fam]
		fmt.Fprintf(&b, "; %s: last Snapshot handed over at %s, last sync ended at %s, %d applied (%d before the write)",
			cmp.Or(fam, "svcproxy"), stamp(f.queued), stamp(f.synced), f.applied, before[fam].applied)
	}
	if err != nil {
		fmt.Fprintf(&b, "; the last /metrics read failed: %v", err)
	}
	return b.String()
}
