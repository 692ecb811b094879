package views

import (
	"net/netip"
	"testing"

	kconntrack "github.com/svcproxy/svcproxy/kernel/conntrack"

	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// Two connections to web as the node's conntrack lists them: one in
// userspace mode (two entries: the client's, REDIRECTed to svcproxy's
// listener, and svcproxy's own to a pod), one in iptables mode (one entry,
// DNATed), and one from outside the cluster to the NodePort (DNAT and
// MASQUERADE).
const conntrackL = `tcp      6 119 TIME_WAIT src=198.19.0.1 dst=198.19.1.10 sport=56800 dport=8080 src=198.19.1.10 dst=198.19.0.1 sport=8080 dport=56800 [ASSURED] mark=0 use=1
tcp      6 118 TIME_WAIT src=127.0.0.1 dst=127.0.0.1 sport=37998 dport=10256 src=127.0.0.1 dst=127.0.0.1 sport=10256 dport=37998 [ASSURED] mark=0 use=1
tcp      6 119 TIME_WAIT src=198.19.1.2 dst=198.18.0.20 sport=53222 dport=80 src=198.19.0.1 dst=198.19.1.2 sport=42845 dport=53222 [ASSURED] mark=0 use=1
tcp      6 100 TIME_WAIT src=198.19.1.2 dst=198.18.0.20 sport=53218 dport=80 src=198.19.1.11 dst=198.19.1.2 sport=8080 dport=53218 [ASSURED] mark=0 use=1
tcp      6 90 TIME_WAIT src=198.19.200.2 dst=198.19.0.1 sport=40000 dport=30080 src=198.19.1.12 dst=198.19.0.1 sport=8080 dport=23456 [ASSURED] mark=0 use=1
udp      17 29 src=198.19.1.2 dst=198.18.0.10 sport=57487 dport=53 src=198.19.0.1 dst=198.19.1.2 sport=53 dport=57487 mark=0 use=1
conntrack v1.4.7 (conntrack-tools): 6 flow entries have been shown.
`

func TestConntrackMeans(t *testing.T) {
	v := New(Config{Net: topology.New(topology.Config{})})
	snap := loadManifests(t)
	local := []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("127.0.0.1")}
	flows := relevant(kconntrack.ParseList(conntrackL), snap, nil, local, false)
	var got []string
	for _, f := range flows {
		got = append(got, v.means(f, snap, local, false))
	}
	require.Equal(t, []string{
		"svcproxy's own connection to 198.19.1.10 (web-0) (userspace: the second connection)",
		"REDIRECT to svcproxy's listener :42845 (userspace: the first connection)",
		"DNAT to 198.19.1.11 (web-1)",
		"DNAT to 198.19.1.12 (web-2), MASQUERADE: the pod saw 198.19.0.1 (node)",
		"DNAT to 198.19.0.1 (node)",
	}, got)
}

// In socklb mode the client's connection through the socket LB is one to
// the pod itself, untranslated; the same process outside the subtree is
// DNATed by the nftables path beside.
func TestConntrackMeansSocketLB(t *testing.T) {
	v := New(Config{Net: topology.New(topology.Config{})})
	snap := loadManifests(t)
	local := []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("127.0.0.1")}
	const socklbL = `tcp      6 119 TIME_WAIT src=198.19.1.2 dst=198.19.1.11 sport=40000 dport=8080 src=198.19.1.11 dst=198.19.1.2 sport=8080 dport=40000 [ASSURED] mark=0 use=1
tcp      6 110 TIME_WAIT src=198.19.1.2 dst=198.18.0.20 sport=40002 dport=80 src=198.19.1.12 dst=198.19.1.2 sport=8080 dport=40002 [ASSURED] mark=0 use=1
tcp      6 100 TIME_WAIT src=198.19.1.2 dst=198.19.1.99 sport=40004 dport=8080 src=198.19.1.99 dst=198.19.1.2 sport=8080 dport=40004 [ASSURED] mark=0 use=1
`
	flows := relevant(kconntrack.ParseList(socklbL), snap, nil, local, true)
	var got []string
	for _, f := range flows {
		got = append(got, v.means(f, snap, local, true))
	}
	require.Equal(t, []string{
		"no rewrite: sent to 198.19.1.11 (web-1) itself (socklb: connect() was rewritten in the socket)",
		"DNAT to 198.19.1.12 (web-2)",
	}, got)
}
