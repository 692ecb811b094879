package iptables

import (
	"net/netip"

	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The test cluster is servicetest's: this node st.ThisNode at 198.19.0.1, pods
// in 198.19.1.0/24, services in 198.18.0.0/16.
var testConfig = Config{
	NodeName:    st.ThisNode,
	ClusterCIDR: netip.MustParsePrefix("198.19.1.0/24"),
}
