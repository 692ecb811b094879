package lab

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/service"
)

func TestRulesViewService(t *testing.T) {
	b, err := os.ReadFile("testdata/iptables-save-c-iptables-mode.txt")
	require.NoError(t, err)
	rs := parseSave(string(b))
	legend := rs.legend()
	web := service.NamespacedName{Namespace: "default", Name: "web"}
	names := topology.DefaultPlan().Names()
	withName := func(a netip.Addr) string {
		if n := names[a]; n != "" {
			return a.String() + " (" + n + ")"
		}
		return a.String()
	}
	got := rs.format(rs.serviceFilter(web, legend), legend, withName, true)
	t.Logf("svclab rules web --counters, iptables part:\n%s", got)
	golden(t, "rules-web-counters.golden", got)
	require.NotContains(t, got, "web-sticky")
	require.NotContains(t, got, "kube-dns")

	all := rs.format(func(l saveLine) bool { return strings.Contains(l.text, "SVCP-") }, legend, withName, false)
	for chain := range legend {
		require.Contains(t, all, "#   "+chain, "every hashed chain is in the legend")
	}
}

// A service port's own chains are named by the port, never by one of its
// endpoints (the first rule of an SVL chain names one).
func TestRulesLegendChainKinds(t *testing.T) {
	save := `*nat
:SVCP-EXT-V7ZMVOA2AOW6ATRL - [0:0]
:SVCP-SVL-V7ZMVOA2AOW6ATRL - [0:0]
:SVCP-SEP-UGKLRHBJ5Q4SV32L - [0:0]
-A SVCP-NODEPORTS -p tcp -m comment --comment "default/web-local:http" -m tcp --dport 30081 -j SVCP-EXT-V7ZMVOA2AOW6ATRL
-A SVCP-EXT-V7ZMVOA2AOW6ATRL -s 198.19.0.0/17 -m comment --comment "pod traffic for default/web-local:http external destinations" -j SVCP-SVC-V7ZMVOA2AOW6ATRL
-A SVCP-EXT-V7ZMVOA2AOW6ATRL -j SVCP-SVL-V7ZMVOA2AOW6ATRL
-A SVCP-SVL-V7ZMVOA2AOW6ATRL -m comment --comment "default/web-local:http -> 198.19.1.10:8080" -j SVCP-SEP-UGKLRHBJ5Q4SV32L
-A SVCP-SEP-UGKLRHBJ5Q4SV32L -p tcp -m comment --comment "default/web-local:http" -m tcp -j DNAT --to-destination 198.19.1.10:8080
COMMIT
`
	legend := parseSave(save).legend()
	require.Equal(t, map[string]string{
		"SVCP-EXT-V7ZMVOA2AOW6ATRL": "default/web-local:http (traffic from outside: NodePort, external IPs)",
		"SVCP-SVC-V7ZMVOA2AOW6ATRL": "default/web-local:http",
		"SVCP-SVL-V7ZMVOA2AOW6ATRL": "default/web-local:http (endpoints on this node: traffic policy Local)",
		"SVCP-SEP-UGKLRHBJ5Q4SV32L": "default/web-local:http -> 198.19.1.10:8080",
	}, legend)
}
