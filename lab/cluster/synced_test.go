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
`
	st, err := parseSyncState(metrics)
	require.NoError(t, err)
	require.Len(t, st, 2)
	v4, v6 := st["IPv4"], st["IPv6"]
	require.Equal(t, uint64(3), v4.applied)
	require.Equal(t, uint64(4), v6.applied)
	require.WithinDuration(t, time.Unix(1796084196, 5e8), v4.queued, time.Millisecond)
	require.WithinDuration(t, time.Unix(1796084196, 6e8), v4.synced, time.Millisecond)

	// The file was read at ...196.4: IPv4 has applied a handover after it,
	// IPv6 was handed one (at ...197.5) but its last sync ended before.
	read := time.Unix(1796084196, 4e8)
	before := syncState{"IPv4": {applied: 2}, "IPv6": {applied: 3}}
	require.False(t, st.appliedAfter(read, before), "IPv6's sync of the handover has not ended")
	v6.synced = time.Unix(1796084197, 6e8)
	st["IPv6"] = v6
	require.True(t, st.appliedAfter(read, before))
	require.False(t, st.appliedAfter(read, syncState{"IPv4": {applied: 3}, "IPv6": {applied: 3}}),
		"IPv4 applied nothing since before")
	require.False(t, syncState{}.appliedAfter(read, nil), "no family: nothing applied")

	_, err = parseSyncState("# no sync metrics\n")
	require.ErrorContains(t, err, "no kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds")
}
