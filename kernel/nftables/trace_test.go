package nftables

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"
)

var (
	node   = netip.MustParseAddr("198.19.0.1")
	pod    = netip.MustParseAddr("198.19.2.7")
	remote = netip.MustParseAddr("203.0.113.9")
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// small is a table in svcproxy's layout, written by hand: web (two endpoints, ClientIP
// affinity for 60s) at 198.18.0.20:80, empty (no endpoints) at 198.18.0.30:80.
const small = `add table ip t
add chain ip t filter-forward { type filter hook forward priority -110 ; }
add chain ip t filter-output { type filter hook output priority -110 ; }
add chain ip t nat-prerouting { type nat hook prerouting priority -101 ; }
add chain ip t nat-output { type nat hook output priority -101 ; }
add chain ip t nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip t services
add chain ip t service-endpoints-check
add chain ip t mark-for-masquerade
add chain ip t masquerading
add chain ip t reject-chain
add chain ip t service-web
add chain ip t endpoint-a
add chain ip t endpoint-b
add set ip t affinity-a { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }
add set ip t affinity-b { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }
add map ip t service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add map ip t no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; }
add rule ip t filter-forward ct state new jump service-endpoints-check
add rule ip t filter-output ct state new jump service-endpoints-check
add rule ip t nat-prerouting jump services
add rule ip t nat-output jump services
add rule ip t nat-postrouting jump masquerading
add rule ip t services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip t service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services
add rule ip t mark-for-masquerade mark set mark or 0x4000
add rule ip t masquerading mark and 0x4000 == 0 return
add rule ip t masquerading mark set mark xor 0x4000
add rule ip t masquerading masquerade fully-random
add rule ip t reject-chain reject
add rule ip t service-web ip daddr 198.18.0.20 tcp dport 80 ip saddr != 198.19.0.0/16 jump mark-for-masquerade
add rule ip t service-web ip saddr @affinity-a goto endpoint-a
add rule ip t service-web ip saddr @affinity-b goto endpoint-b
add rule ip t service-web numgen random mod 2 == 0 goto endpoint-a
add rule ip t service-web goto endpoint-b
add rule ip t endpoint-a ip saddr 198.19.1.1 jump mark-for-masquerade
add rule ip t endpoint-a update @affinity-a { ip saddr }
add rule ip t endpoint-a meta l4proto tcp dnat to 198.19.1.1:8080
add rule ip t endpoint-b ip saddr 198.19.1.2 jump mark-for-masquerade
add rule ip t endpoint-b update @affinity-b { ip saddr }
add rule ip t endpoint-b meta l4proto tcp dnat to 198.19.1.2:8080
add element ip t service-ips { 198.18.0.20 . tcp . 80 : goto service-web }
add element ip t no-endpoint-services { 198.18.0.30 . tcp . 80 : goto reject-chain }
`

func newSmall(t *testing.T) *Fake {
	t.Helper()
	f := NewFake("t")
	require.NoError(t, f.ParseDump(small))
	f.SetLocalAddrs(node)
	return f
}

func TestTrace(t *testing.T) {
	tests := []struct {
		name string
		pkt  Packet
		want string
	}{
		{"pod to a service", Packet{Src: pod, Dst: ap("198.18.0.20:80")}, "DNAT 198.19.1.1:8080"},
		{"pod to a service, second endpoint", Packet{Src: pod, Dst: ap("198.18.0.20:80"), Pick: 1}, "DNAT 198.19.1.2:8080"},
		{"outside is masqueraded", Packet{Src: remote, Dst: ap("198.18.0.20:80")}, "DNAT 198.19.1.1:8080, MASQUERADE"},
		{"hairpin is masqueraded", Packet{Src: netip.MustParseAddr("198.19.1.2"), Dst: ap("198.18.0.20:80"), Pick: 1}, "DNAT 198.19.1.2:8080, MASQUERADE"},
		{"the node, through output", Packet{Src: node, Dst: ap("198.18.0.20:80"), Local: true}, "DNAT 198.19.1.1:8080"},
		{"wrong port passes", Packet{Src: pod, Dst: ap("198.18.0.20:81")}, "ACCEPT"},
		{"wrong protocol passes", Packet{Proto: "udp", Src: pod, Dst: ap("198.18.0.20:80")}, "ACCEPT"},
		{"no endpoints is rejected", Packet{Src: pod, Dst: ap("198.18.0.30:80")}, "REJECT"},
		{"no endpoints, from the node", Packet{Src: node, Dst: ap("198.18.0.30:80"), Local: true}, "REJECT"},
		{"an established packet skips nat", Packet{Src: pod, Dst: ap("198.18.0.20:80"), State: "established"}, "ACCEPT"},
		{"a foreign mark is kept", Packet{Src: pod, Dst: ap("198.18.0.99:80"), Mark: 0x1}, "ACCEPT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := newSmall(t).Trace(tc.pkt)
			require.NoError(t, err)
			t.Logf("the packet's way (go test -v prints it):\n%s", tr)
			assert.Equal(t, tc.want, tr.Result(), "trace:\n%s", tr)
			assert.Equal(t, tc.pkt.Mark, tr.Mark, "the masquerade bit is cleared before it leaves\n%s", tr)
		})
	}
}

func TestTraceString(t *testing.T) {
	tr, err := newSmall(t).Trace(Packet{Src: remote, Dst: ap("198.18.0.20:80"), Pick: 1})
	require.NoError(t, err)
	golden(t, "trace_web_from_outside.txt", tr.String())
}

// Each of two endpoints gets half of the new connections: 1/2, then the rest.
func TestTraceAllSpread(t *testing.T) {
	all, err := newSmall(t).TraceAll(Packet{Src: pod, Dst: ap("198.18.0.20:80")})
	require.NoError(t, err)
	got := map[string]float64{}
	for _, tr := range all {
		got[tr.Result()] += tr.Probability
	}
	assert.Equal(t, map[string]float64{"DNAT 198.19.1.1:8080": 0.5, "DNAT 198.19.1.2:8080": 0.5}, got)
}

// The dynamic set pins a client to its endpoint until the timeout passes.
func TestTraceAffinity(t *testing.T) {
	f := newSmall(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Now = func() time.Time { return now }
	trace := func(pick int) string {
		t.Helper()
		tr, err := f.Trace(Packet{Src: pod, Dst: ap("198.18.0.20:80"), Pick: pick})
		require.NoError(t, err)
		return tr.Result()
	}
	require.Equal(t, "DNAT 198.19.1.2:8080", trace(1))
	now = now.Add(60 * time.Second) // exactly the timeout: still pinned
	assert.Equal(t, "DNAT 198.19.1.2:8080", trace(0))
	now = now.Add(61 * time.Second)
	assert.Equal(t, "DNAT 198.19.1.1:8080", trace(0), "after the timeout the choice is random again")

	// TraceAll leaves the sets alone: another client sees both endpoints.
	all, err := f.TraceAll(Packet{Src: remote, Dst: ap("198.18.0.20:80")})
	require.NoError(t, err)
	assert.Len(t, all, 2)
}

// Run applies a transaction the way the kernel would, all or nothing.
func TestFakeRun(t *testing.T) {
	f := newSmall(t)
	tx := f.NewTransaction()
	tx.Add(&knftables.Element{Map: "service-ips", Key: []string{"198.18.0.40", "tcp", "80"}, Value: []string{"goto no-such-chain"}})
	assert.Error(t, f.Run(context.Background(), tx), "a jump to a missing chain")
	tr, err := f.Trace(Packet{Src: pod, Dst: ap("198.18.0.40:80")})
	require.NoError(t, err)
	assert.Equal(t, "ACCEPT", tr.Result(), "the failed transaction changed nothing")
	assert.Equal(t, 1, f.Runs())
}

func TestTraceUnmodelled(t *testing.T) {
	f := NewFake("t")
	require.NoError(t, f.ParseDump("add table ip t\nadd chain ip t pre { type filter hook prerouting priority 0 ; }\nadd rule ip t pre ip dscp 4 drop\n"))
	_, err := f.Trace(Packet{Src: pod, Dst: ap("198.18.0.20:80")})
	assert.ErrorContains(t, err, "not modelled")
}

var update = os.Getenv("UPDATE_GOLDEN") == "1"

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "UPDATE_GOLDEN=1 go test writes it")
	assert.Equal(t, string(want), got)
}
