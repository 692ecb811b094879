package conntrack

import (
	"net/netip"
	"testing"
)

func TestParseList(t *testing.T) {
	out := `tcp      6 119 TIME_WAIT src=198.19.1.2 dst=198.18.0.20 sport=40000 dport=80 src=198.19.1.10 dst=198.19.1.2 sport=8080 dport=40000 [ASSURED] mark=0 use=1
udp      17 29 src=198.19.1.2 dst=198.18.0.10 sport=57487 dport=53 src=198.19.0.1 dst=198.19.1.2 sport=53 dport=57487 mark=0 use=1
icmp     1 29 src=198.19.1.2 dst=198.19.0.1 type=8 code=0 id=1 src=198.19.0.1 dst=198.19.1.2 type=0 code=0 id=1 mark=0 use=1
conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown.
`
	ap := netip.MustParseAddrPort
	want := []Entry{
		{Protocol: "tcp", Timeout: 119, State: "TIME_WAIT", Assured: true,
			Orig:  [2]netip.AddrPort{ap("198.19.1.2:40000"), ap("198.18.0.20:80")},
			Reply: [2]netip.AddrPort{ap("198.19.1.10:8080"), ap("198.19.1.2:40000")}},
		{Protocol: "udp", Timeout: 29,
			Orig:  [2]netip.AddrPort{ap("198.19.1.2:57487"), ap("198.18.0.10:53")},
			Reply: [2]netip.AddrPort{ap("198.19.0.1:53"), ap("198.19.1.2:57487")}},
	}
	got := ParseList(out)
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
