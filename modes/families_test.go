package modes

import (
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
)

// Every mode serves IPv6, hybrid whatever its kernel path: the only reasons
// left not to are the namespace's (no IPv6, IPv6 disabled, no ip6tables),
// which never name a flag. A mode that is not one is refused by name.
func TestIPv6SupportedByEveryMode(t *testing.T) {
	for _, mode := range []string{dataplane.ModeUserspace, dataplane.ModeIPTables, dataplane.ModeNFTables, dataplane.ModeIPVS, dataplane.ModeHybrid} {
		if err := ipv6Supported(mode); err != nil && strings.Contains(err.Error(), "--") {
			t.Errorf("ipv6Supported(%s): %v, want nil or a reason of the namespace's", mode, err)
		}
	}
	if err := ipv6Supported("bpf"); err == nil || !strings.Contains(err.Error(), "--mode bpf") {
		t.Errorf(`ipv6Supported("bpf"): %v, want an error naming --mode bpf`, err)
	}
}
