package iptables

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	node   = netip.MustParseAddr("198.19.0.1")
	pod    = netip.MustParseAddr("198.19.2.7")
	remote = netip.MustParseAddr("203.0.113.9")
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// TestTracePortals traces packets through the portals rule set of fake_test.go.
func TestTracePortals(t *testing.T) {
	tests := []struct {
		name string
		pkt  Packet
		want string
		mark uint32
	}{
		{"portal from a pod", Packet{Src: pod, Dst: ap("198.18.0.10:80"), InIface: "eth0"}, "REDIRECT :40123", 0},
		{"portal from the node", Packet{Src: node, Dst: ap("198.18.0.10:80"), Local: true}, "REDIRECT :40123", 0},
		{"UDP portal", Packet{Proto: "udp", Src: pod, Dst: ap("198.18.0.10:53")}, "REDIRECT :40124", 0},
		{"wrong port passes", Packet{Src: pod, Dst: ap("198.18.0.10:81")}, "ACCEPT", 0},
		{"wrong protocol passes", Packet{Proto: "udp", Src: pod, Dst: ap("198.18.0.10:80")}, "ACCEPT", 0},
		{"service from a pod", Packet{Src: pod, Dst: ap("198.18.0.20:80")}, "DNAT 198.19.1.1:8080", 0},
		{"service from outside is masqueraded", Packet{Src: remote, Dst: ap("198.18.0.20:80")}, "DNAT 198.19.1.1:8080, MASQUERADE", 0},
		{"hairpin is masqueraded", Packet{Src: netip.MustParseAddr("198.19.1.1"), Dst: ap("198.18.0.20:80")}, "DNAT 198.19.1.1:8080, MASQUERADE", 0},
		{"no endpoints is rejected", Packet{Src: pod, Dst: ap("198.18.0.30:80")}, "REJECT", 0},
		{"no endpoints, from the node", Packet{Src: node, Dst: ap("198.18.0.30:80"), Local: true}, "REJECT", 0},
		{"an established packet skips nat", Packet{Src: pod, Dst: ap("198.18.0.10:80"), State: "ESTABLISHED"}, "ACCEPT", 0},
		{"a foreign mark is kept", Packet{Src: pod, Dst: ap("198.18.0.99:80"), Mark: 0x1}, "ACCEPT", 0x1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newPortals(t)
			f.SetLocalAddrs(node)
			tr, err := f.Trace(tc.pkt)
			require.NoError(t, err)
			t.Logf("the packet's way (go test -v prints it):\n%s", tr)
			assert.Equal(t, tc.want, tr.Result(), "trace:\n%s", tr)
			assert.Equal(t, tc.mark, tr.Mark, "the masquerade bit is cleared before it leaves\n%s", tr)
		})
	}
}

func TestTraceString(t *testing.T) {
	f := newPortals(t)
	f.SetLocalAddrs(node)
	tr, err := f.Trace(Packet{Src: remote, Dst: ap("198.18.0.20:80"), InIface: "eth0", Pick: 1})
	require.NoError(t, err)
	golden(t, "trace_web_from_outside.txt", tr.String())
	tr, err = f.Trace(Packet{Src: pod, Dst: ap("198.18.0.10:80"), InIface: "eth0"})
	require.NoError(t, err)
	golden(t, "trace_portal.txt", tr.String())
}

// TestTraceSpread: kube-proxy's probabilities 1/3, 1/2, then an unconditional rule
// give each endpoint a third, and Pick selects each in turn.
func TestTraceSpread(t *testing.T) {
	rules := `*nat
:SVCP-SVC - [0:0]
-A PREROUTING -d 198.18.0.40/32 -p tcp -m tcp --dport 80 -j SVCP-SVC
-A SVCP-SVC -p tcp -m statistic --mode random --probability 0.33333333349 -j DNAT --to-destination 198.19.1.1:80
-A SVCP-SVC -p tcp -m statistic --mode random --probability 0.50000000000 -j DNAT --to-destination 198.19.1.2:80
-A SVCP-SVC -p tcp -j DNAT --to-destination 198.19.1.3:80
COMMIT
`
	f := NewFake()
	require.NoError(t, f.Restore(context.Background(), []byte(rules)))
	pkt := Packet{Src: pod, Dst: ap("198.18.0.40:80")}
	all, err := f.TraceAll(pkt)
	require.NoError(t, err)
	got := map[string]float64{}
	for _, tr := range all {
		got[tr.Result()] += tr.Probability
	}
	assert.Len(t, got, 3)
	for dest, p := range got {
		assert.InDelta(t, 1.0/3, p, 1e-6, dest)
	}
	for i, want := range []string{"198.19.1.1:80", "198.19.1.2:80", "198.19.1.3:80"} {
		pkt.Pick = i
		tr, err := f.Trace(pkt)
		require.NoError(t, err)
		assert.Equal(t, "DNAT "+want, tr.Result(), "Pick %d", i)
	}
}

// TestTraceAffinity: the recent match pins a client to its endpoint until the
// affinity timeout passes (a fake clock), then the choice is random again.
func TestTraceAffinity(t *testing.T) {
	f := newPortals(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Now = func() time.Time { return now }
	pkt := Packet{Src: pod, Dst: ap("198.18.0.20:80")}

	pkt.Pick = 1
	tr, err := f.Trace(pkt)
	require.NoError(t, err)
	require.Equal(t, "DNAT 198.19.1.2:8080", tr.Result())

	now = now.Add(3 * time.Hour) // exactly the 10800 s timeout: still pinned
	pkt.Pick = 0                 // would pick endpoint A if it were random
	tr, err = f.Trace(pkt)
	require.NoError(t, err)
	assert.Equal(t, "DNAT 198.19.1.2:8080", tr.Result(), "affinity holds:\n%s", tr)
	assert.Equal(t, 1.0, tr.Probability)

	// TraceAll does not record affinity: another client still sees both endpoints.
	all, err := f.TraceAll(Packet{Src: remote, Dst: ap("198.18.0.20:80")})
	require.NoError(t, err)
	assert.Len(t, all, 2)

	now = now.Add(3*time.Hour + time.Second) // the last --set was refreshed 3 h ago
	tr, err = f.Trace(pkt)
	require.NoError(t, err)
	assert.Equal(t, "DNAT 198.19.1.1:8080", tr.Result(), "affinity expired:\n%s", tr)
}

// TestTraceMatches covers each modelled match and target on its own.
func TestTraceMatches(t *testing.T) {
	tests := []struct {
		name  string
		rules string // rules for nat PREROUTING (table nat) unless table is set
		table Table
		pkt   Packet
		want  string
	}{
		{"source prefix", "-s 198.19.0.0/16 -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.1:80")}, "DNAT 198.19.9.9:80"},
		{"negated source", "! -s 198.19.0.0/16 -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.1:80")}, "ACCEPT"},
		{"negated dport", "-p tcp -m tcp ! --dport 80 -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.1:81")}, "DNAT 198.19.9.9:81"},
		{"port range", "-p tcp --dport 1000:2000 -j DNAT --to-destination 198.19.9.9:80", "", Packet{Src: pod, Dst: ap("198.18.0.1:1500")}, "DNAT 198.19.9.9:80"},
		{"sport", "-p udp --sport 53 -j DNAT --to-destination 198.19.9.9", "", Packet{Proto: "udp", Src: pod, SrcPort: 53, Dst: ap("198.18.0.1:9")}, "DNAT 198.19.9.9:9"},
		{"multiport", "-p tcp -m multiport --dports 80,443 -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.1:443")}, "DNAT 198.19.9.9:443"},
		{"multiport miss", "-p tcp -m multiport --dports 80,443 -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.1:8443")}, "ACCEPT"},
		{"addrtype LOCAL", "-m addrtype --dst-type LOCAL -p tcp --dport 30080 -j DNAT --to-destination 198.19.9.9:80", "", Packet{Src: remote, Dst: ap("198.19.0.1:30080")}, "DNAT 198.19.9.9:80"},
		{"addrtype not LOCAL", "-m addrtype --dst-type LOCAL -p tcp --dport 30080 -j DNAT --to-destination 198.19.9.9:80", "", Packet{Src: remote, Dst: ap("198.19.0.2:30080")}, "ACCEPT"},
		{"in interface wildcard", "-i veth+ -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.1:80"), InIface: "veth12"}, "DNAT 198.19.9.9:80"},
		{"negated in interface", "! -i lo -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.1:80"), InIface: "lo"}, "ACCEPT"},
		{"mark set then matched", "-j MARK --set-xmark 0x10/0xff\n-A PREROUTING -m mark --mark 0x10/0xff -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.1:80"), Mark: 0x1ff}, "DNAT 198.19.9.9:80"},
		{"conntrack NEW", "-m conntrack --ctstate NEW -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.1:80")}, "DNAT 198.19.9.9:80"},
		{"state INVALID dropped", "-m conntrack --ctstate INVALID -j DROP", TableFilter, Packet{Src: pod, Dst: ap("198.18.0.1:80"), State: "INVALID"}, "DROP"},
		{"established accepted", "-m state --state RELATED,ESTABLISHED -j ACCEPT\n-A FORWARD -j DROP", TableFilter, Packet{Src: pod, Dst: ap("198.18.0.1:80"), State: "ESTABLISHED"}, "ACCEPT"},
		{"syn", "-p tcp --syn -j REJECT", TableFilter, Packet{Src: pod, Dst: ap("198.18.0.1:80")}, "REJECT"},
		{"RETURN", ":SVCP-X - [0:0]\n-A PREROUTING -j SVCP-X\n-A SVCP-X -j RETURN\n-A SVCP-X -j DNAT --to-destination 198.19.9.9\n-A PREROUTING -j DNAT --to-destination 198.19.8.8", "", Packet{Src: pod, Dst: ap("198.18.0.1:80")}, "DNAT 198.19.8.8:80"},
		{"ipset hash:ip,port", "-m set --match-set SVCP-CLUSTER-IP dst,dst -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.5:80")}, "DNAT 198.19.9.9:80"},
		{"ipset miss", "-m set --match-set SVCP-CLUSTER-IP dst,dst -j DNAT --to-destination 198.19.9.9", "", Packet{Proto: "udp", Src: pod, Dst: ap("198.18.0.5:80")}, "ACCEPT"},
		{"negated ipset", "-m set ! --match-set SVCP-CLUSTER-IP dst,dst -j DNAT --to-destination 198.19.9.9", "", Packet{Src: pod, Dst: ap("198.18.0.6:80")}, "DNAT 198.19.9.9:80"},
		{"SNAT", "-s 198.19.0.0/16 -d 198.19.9.9/32 -j SNAT --to-source 198.19.0.1", "POSTROUTING", Packet{Src: pod, Dst: ap("198.19.9.9:80")}, "SNAT 198.19.0.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake()
			f.SetLocalAddrs(node)
			require.NoError(t, f.SetIPSet("SVCP-CLUSTER-IP", "198.18.0.5,tcp:80"))
			table, chain := TableNAT, "PREROUTING"
			switch tc.table {
			case TableFilter:
				table, chain = TableFilter, "FORWARD"
			case "POSTROUTING":
				chain = "POSTROUTING"
			}
			text := "*" + string(table) + "\n"
			if tc.rules[0] == ':' {
				text += tc.rules + "\nCOMMIT\n"
			} else {
				text += "-A " + chain + " " + tc.rules + "\nCOMMIT\n"
			}
			require.NoError(t, f.Restore(context.Background(), []byte(text)))
			tr, err := f.Trace(tc.pkt)
			require.NoError(t, err)
			assert.Equal(t, tc.want, tr.Result(), "trace:\n%s", tr)
		})
	}
}

func TestTraceErrors(t *testing.T) {
	tests := []struct{ name, rules, err string }{
		{"unmodelled module", "-A PREROUTING -m physdev --physdev-is-in -j ACCEPT", `nat/PREROUTING rule "-m physdev --physdev-is-in -j ACCEPT": match module "physdev" is not modelled`},
		{"DNAT from POSTROUTING", ":SVCP-X - [0:0]\n-A SVCP-X -j DNAT --to-destination 198.19.9.9\n-A POSTROUTING -j SVCP-X", "DNAT is only valid from PREROUTING and OUTPUT"},
		{"loop", ":SVCP-X - [0:0]\n-A SVCP-X -j SVCP-X\n-A PREROUTING -j SVCP-X", "a loop?"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake()
			require.NoError(t, f.Restore(context.Background(), []byte("*nat\n"+tc.rules+"\nCOMMIT\n")))
			_, err := f.Trace(Packet{Src: pod, Dst: ap("198.18.0.1:80")})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}
