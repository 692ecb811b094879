package iptables

import (
	"maps"
	"testing"
)

func TestDNATCounts(t *testing.T) {
	save := `*nat
:PREROUTING ACCEPT [310:18600]
:SVCP-SEP-AAAA - [0:0]
:SVCP-SEP-BBBB - [0:0]
:SVCP-SVC-CCCC - [0:0]
[0:0] -A PREROUTING -m comment --comment "svcproxy service portals" -j SVCP-SERVICES
[2:120] -A SVCP-SEP-AAAA -s 198.19.2.2/32 -m comment --comment "default/web:http" -j SVCP-MARK-MASQ
[40:2400] -A SVCP-SEP-AAAA -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 198.19.2.2:8080
[7:420] -A SVCP-SEP-BBBB -p tcp -m comment --comment "default/web:http" -m recent --set --name SVCP-SEP-BBBB --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 198.19.2.3:8080
[47:2820] -A SVCP-SVC-CCCC -m comment --comment "default/web:http -> 198.19.2.2:8080" -m statistic --mode random --probability 0.5000000000 -j SVCP-SEP-AAAA
[3:180] -A PORTALS -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 40000
COMMIT
`
	got := dnatCounts([]byte(save))
	want := map[string]uint64{"SVCP-SEP-AAAA": 40, "SVCP-SEP-BBBB": 7}
	if !maps.Equal(got, want) {
		t.Errorf("dnatCounts: %v, want %v", got, want)
	}
}
