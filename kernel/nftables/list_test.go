package nftables

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// nft-list-nftables-mode.txt is `nft list table ip svcproxy` in the lab's node
// with svcproxy in nftables mode (`svclab up --mode nftables`, then `svclab exec
// node -- nft list table ip svcproxy`): the table as the kernel prints it, which
// differs from what svcproxy wrote ("numgen random mod 3 0", "meta mark set
// meta mark | 0x00004000", "priority dstnat - 1", elements with comments).
func TestParseListing(t *testing.T) {
	b, err := os.ReadFile("testdata/nft-list-nftables-mode.txt")
	require.NoError(t, err)
	tab, err := ParseListing(string(b))
	require.NoError(t, err)
	require.Equal(t, "svcproxy", tab.Name)

	f, err := tab.Fake()
	require.NoError(t, err)
	f.SetLocalAddrs(netip.MustParseAddr("198.19.0.1"))
	tests := []struct {
		name string
		pkt  Packet
		want string
	}{
		{"client to web", Packet{Src: netip.MustParseAddr("198.19.1.2"), Dst: netip.MustParseAddrPort("198.18.0.20:80"), Pick: 1}, "DNAT 198.19.1.11:8080"},
		// outside is beyond the lab's cluster CIDR (198.19.0.0/17): masqueraded.
		{"off-cluster to web", Packet{Src: netip.MustParseAddr("198.19.200.2"), Dst: netip.MustParseAddrPort("198.18.0.20:80")}, "DNAT 198.19.1.10:8080, MASQUERADE"},
		// A pod sent to itself: the hairpin set masquerades it.
		{"web-0 to web, back to itself", Packet{Src: netip.MustParseAddr("198.19.1.10"), Dst: netip.MustParseAddrPort("198.18.0.20:80")}, "DNAT 198.19.1.10:8080, MASQUERADE"},
		{"web-0 to web, to web-1", Packet{Src: netip.MustParseAddr("198.19.1.10"), Dst: netip.MustParseAddrPort("198.18.0.20:80"), Pick: 1}, "DNAT 198.19.1.11:8080"},
		{"to the NodePort", Packet{Src: netip.MustParseAddr("198.19.1.2"), Dst: netip.MustParseAddrPort("198.19.0.1:30080"), Pick: 2}, "DNAT 198.19.1.12:8080, MASQUERADE"},
		{"DNS over UDP", Packet{Proto: "udp", Src: netip.MustParseAddr("198.19.1.2"), Dst: netip.MustParseAddrPort("198.18.0.10:53")}, "DNAT 198.19.0.1:53"},
		{"a ClusterIP's unused port", Packet{Src: netip.MustParseAddr("198.19.1.2"), Dst: netip.MustParseAddrPort("198.18.0.20:81")}, "REJECT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := f.Trace(tt.pkt)
			require.NoError(t, err)
			t.Logf("the packet's way:\n%s", tr)
			require.Equal(t, tt.want, tr.Result())
		})
	}
}

func TestParseElementAndDuration(t *testing.T) {
	e, err := parseElement(`198.18.0.30 . udp . 7 comment "default/echo:echo/UDP" : goto service-HAOI4LZB-default/echo/udp/echo`)
	require.NoError(t, err)
	require.Equal(t, ListedElement{Key: []string{"198.18.0.30", "udp", "7"}, Value: "goto service-HAOI4LZB-default/echo/udp/echo", Comment: "default/echo:echo/UDP"}, e)
	e, err = parseElement(`198.19.1.2 timeout 10m expires 9m58s`)
	require.NoError(t, err)
	require.Equal(t, []string{"198.19.1.2"}, e.Key)
	for s, want := range map[string]time.Duration{"10m": 10 * time.Minute, "3h": 3 * time.Hour, "1d2h": 26 * time.Hour, "10800s": 3 * time.Hour, "500ms": 500 * time.Millisecond} {
		d, err := parseDuration(s)
		require.NoError(t, err, s)
		require.Equal(t, want, d, s)
	}
	_, err = parseDuration("10x")
	require.Error(t, err)
}
