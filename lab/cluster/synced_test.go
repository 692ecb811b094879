package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// svcproxy syncs its IPv4 dataplane, then its IPv6 one, each with its
// metrics: a change is applied once both say so.
func TestParseSyncState(t *testing.T) {
	const metrics = `# TYPE svcproxy_snapshot_programming_duration_seconds histogram
svcproxy_snapshot_programming_duration_seconds_bucket{ip_family="IPv4",mode="iptables",le="+Inf"} 3
svcproxy_snapshot_programming_duration_seconds_sum{ip_family="IPv4",mode="iptables"} 0.1
svcproxy_snapshot_programming_duration_seconds_count{ip_family="IPv4",mode="iptables"} 3
svcproxy_snapshot_programming_duration_seconds_bucket{ip_family="IPv6",mode="iptables",le="+Inf"} 4
svcproxy_snapshot_programming_duration_seconds_sum{ip_family="IPv6",mode="iptables"} 0.1
svcproxy_snapshot_programming_duration_seconds_count{ip_family="IPv6",mode="iptables"} 4
# TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} 1.7960841965e+09
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv6"} 1.7960841975e+09
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.7960841966e+09
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 1.7960841970e+09
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.79608415e+09
`
	st, err := parseSyncState(metrics)
	require.NoError(t, err)
	require.Len(t, st, 2)
	v4, v6 := st["IPv4"], st["IPv6"]
	require.Equal(t, uint64(3), v4.applied)
	require.Equal(t, uint64(4), v6.applied)
	require.InDelta(t, 1.79608415e+09, v6.process, 0.5, "every family knows which svcproxy answered")
	require.WithinDuration(t, time.Unix(1796084196, 5e8), v4.queued, time.Millisecond)
	require.WithinDuration(t, time.Unix(1796084196, 6e8), v4.synced, time.Millisecond)

	// The file was read at ...196.4: IPv4 has applied a handover after it,
	// IPv6 was handed one (at ...197.5) but its last sync ended before.
	read := time.Unix(1796084196, 4e8)
	before := syncState{"IPv4": {applied: 2, process: v4.process}, "IPv6": {applied: 3, process: v6.process}}
	require.False(t, st.appliedAfter(read, before), "IPv6's sync of the handover has not ended")
	v6.synced = time.Unix(1796084197, 6e8)
	st["IPv6"] = v6
	require.True(t, st.appliedAfter(read, before))
	require.False(t, st.appliedAfter(read, syncState{"IPv4": {applied: 3, process: v4.process}, "IPv6": {applied: 3, process: v6.process}}),
		"IPv4 applied nothing since before")
	require.False(t, syncState{}.appliedAfter(read, nil), "no family: nothing applied")

	_, err = parseSyncState("# no sync metrics\n")
	require.ErrorContains(t, err, "no kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds")
}

// A svcproxy restarted in the middle of a wait (svclab mode from another
// terminal) counts its syncs from zero and read the file when it started:
// its first sync after that applies the change, though it has applied fewer
// Snapshots than the old one had.
func TestAppliedAfterRestart(t *testing.T) {
	write := time.Unix(1796084100, 0)
	before := syncState{"IPv4": {applied: 7, process: 1796084000}}
	started := write.Add(2 * time.Second) // its "svcproxy starting" line
	st := syncState{"IPv4": {process: 1796084102, queued: started.Add(time.Second), synced: started.Add(1100 * time.Millisecond), applied: 1}}
	require.True(t, st.appliedAfter(started, before), "the new svcproxy's first sync holds the change")
	st["IPv4"] = familySync{process: 1796084102, queued: started.Add(time.Second), synced: started.Add(500 * time.Millisecond), applied: 1}
	require.False(t, st.appliedAfter(started, before), "the sync of its first handover has not ended")
	st["IPv4"] = familySync{process: 1796084000, queued: started.Add(time.Second), synced: started.Add(1100 * time.Millisecond), applied: 1}
	require.False(t, st.appliedAfter(started, before), "the same process must apply more than before")
}

// The file is read at a reload, or at a start: the last of either lines at
// or after the write counts.
func TestLastLogged(t *testing.T) {
	const log = `time=2026-12-07T06:00:00.000000000Z level=INFO msg="svcproxy starting" mode=userspace source=services
time=2026-12-07T06:00:05.000000000Z level=INFO msg="services file reloaded" file=/run/svclab/services.yaml objects=20 services=9 changes=1
time=2026-12-07T06:00:09.000000000Z level=INFO msg="svcproxy starting" mode=iptables source=services
time=2026-12-07T06:00:10.000000000Z level=INFO msg="a line of another kind"
`
	at := func(s string) time.Time { t, _ := time.Parse(time.RFC3339, s); return t }
	got, ok := lastLogged(log, at("2026-12-07T06:00:04Z"))
	require.True(t, ok)
	require.Equal(t, at("2026-12-07T06:00:09Z"), got.UTC())
	_, ok = lastLogged(log, at("2026-12-07T06:00:09.5Z"))
	require.False(t, ok, "nothing read since")
}
