package lab

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/service"
)

func TestRulesViewService(t *testing.T) {
	b, err := os.ReadFile("testdata/iptables-save-c-iptables-mode.txt")
	require.NoError(t, err)
	rs := parseSave(string(b))
	legend := rs.legend()
	web := service.NamespacedName{Namespace: "default", Name: "web"}
	names := DefaultPlan().Names()
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
