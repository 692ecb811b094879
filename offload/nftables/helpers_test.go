package nftables

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The test cluster is servicetest's: this node st.ThisNode at 198.19.0.1, pods
// in 198.19.1.0/24, services in 198.18.0.0/16.
var testConfig = Config{
	NodeName:    st.ThisNode,
	ClusterCIDR: netip.MustParsePrefix("198.19.1.0/24"),
}

// labPort is the port of st.Service("web", ...).
var labPort = service.PortName{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"}, Port: "p", Protocol: service.TCP}
