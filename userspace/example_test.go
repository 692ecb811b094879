package userspace_test

import (
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// A Service "default/web" with ClusterIP 198.18.0.10 and port 80 is served by a
// listener on port 40123: its portals send the ClusterIP's packets there, from
// pods (PREROUTING) and from the node itself (OUTPUT). "default/empty" has no
// endpoints, so its packets are rejected instead of left to time out. The
// listeners themselves take only what a portal redirected: a packet sent
// straight to port 40123 of a node address is rejected.
func ExampleRender() {
	web := service.NamespacedName{Namespace: "default", Name: "web"}
	empty := service.NamespacedName{Namespace: "default", Name: "empty"}
	fmt.Printf("%s", userspace.Render(service.IPv4, []userspace.Portal{{
		Name:         service.PortName{NamespacedName: web, Port: "http", Protocol: service.TCP},
		Protocol:     service.TCP,
		IPs:          []netip.Addr{netip.MustParseAddr("198.18.0.10")},
		Port:         80,
		Listener:     40123,
		HasEndpoints: true,
	}, {
		Name:     service.PortName{NamespacedName: empty, Port: "http", Protocol: service.TCP},
		Protocol: service.TCP,
		IPs:      []netip.Addr{netip.MustParseAddr("198.18.0.11")},
		Port:     80,
		Listener: 40124,
	}}))
	// Output:
	// *filter
	// :SVCP-LISTENERS - [0:0]
	// :SVCP-REJECT - [0:0]
	// :SVCP-NODEPORTS-REJECT - [0:0]
	// -A SVCP-LISTENERS -m conntrack --ctstate DNAT -m comment --comment "redirected by a portal" -j RETURN
	// -A SVCP-LISTENERS -m conntrack ! --ctstate NEW -m comment --comment "not a new connection" -j RETURN
	// -A SVCP-LISTENERS -p tcp -m comment --comment "default/web:http listener, not through a portal" -m tcp --dport 40123 -m conntrack --ctstate NEW -j REJECT --reject-with icmp-port-unreachable
	// -A SVCP-LISTENERS -p tcp -m comment --comment "default/empty:http listener, not through a portal" -m tcp --dport 40124 -m conntrack --ctstate NEW -j REJECT --reject-with icmp-port-unreachable
	// -A SVCP-REJECT -d 198.18.0.11/32 -p tcp -m comment --comment "default/empty:http has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
	// COMMIT
	// *nat
	// :SVCP-PORTALS-CONTAINER - [0:0]
	// :SVCP-PORTALS-HOST - [0:0]
	// -A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32 -p tcp -m comment --comment "default/web:http" -m tcp --dport 80 -j REDIRECT --to-ports 40123
	// -A SVCP-PORTALS-HOST -d 198.18.0.10/32 -p tcp -m comment --comment "default/web:http" -m tcp --dport 80 -j REDIRECT --to-ports 40123
	// COMMIT
}
