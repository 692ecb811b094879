package lab

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// svcproxy syncs its IPv4 dataplane, then its IPv6 one: a change of the
// lab's (IPv4) Services is applied when the IPv4 one says so, whatever the
// IPv6 one's figures.
func TestParseSyncState(t *testing.T) {
	const metrics = `# TYPE kubeproxy_network_programming_duration_seconds histogram
kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="+Inf"} 3
kubeproxy_network_programming_duration_seconds_sum{ip_family="IPv4"} 0.1
kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"} 3
kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv6",le="+Inf"} 4
kubeproxy_network_programming_duration_seconds_sum{ip_family="IPv6"} 0.1
kubeproxy_network_programming_duration_seconds_count{ip_family="IPv6"} 4
# TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} 1.7960841965e+09
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv6"} 1.7960841975e+09
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.7960841966e+09
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 1.7960841976e+09
`
	st, err := parseSyncState(metrics)
	require.NoError(t, err)
	require.Equal(t, uint64(3), st.applied)
	require.WithinDuration(t, time.Unix(1796084196, 5e8), st.queued, time.Millisecond)
	require.WithinDuration(t, time.Unix(1796084196, 6e8), st.synced, time.Millisecond)

	_, err = parseSyncState("# no sync metrics\n")
	require.ErrorContains(t, err, "no kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds")
}
