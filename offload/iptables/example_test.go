package iptables_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/dataplane"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/offload/iptables"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// web is a Service with three ready pods on this node.
const web = `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 198.18.0.20
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [198.19.1.10], nodeName: node}
- {addresses: [198.19.1.11], nodeName: node}
- {addresses: [198.19.1.12], nodeName: node}
`

func snapshot(manifests string) *service.Snapshot {
	snap, err := watch.SnapshotOf("services.yaml", []byte(manifests))
	if err != nil {
		panic(err)
	}
	return snap
}

// The nat rules of one Service are a tree: SVCP-SERVICES matches the ClusterIP
// and port and jumps to the port's SVCP-SVC- chain; that chain picks one
// SVCP-SEP- chain per new connection, the first with probability 1/3, the
// second with 1/2 of what is left, the third with the rest (each pod gets a
// third); each SVCP-SEP- chain DNATs to its pod. The chain names are hashes of
// the service port (and endpoint), as kube-proxy's are.
func ExampleRender() {
	rules, err := iptables.Render(iptables.Config{
		Node: dataplane.Node{NodeName: "node", ClusterCIDR: netip.MustParsePrefix("198.19.0.0/17")},
	}, snapshot(web))
	if err != nil {
		panic(err)
	}
	fmt.Print(string(rules))
	// Output:
	// *filter
	// :SVCP-SERVICES - [0:0]
	// :SVCP-EXTERNAL-SERVICES - [0:0]
	// :SVCP-FORWARD - [0:0]
	// -A SVCP-FORWARD -m comment --comment "svcproxy forwarding rules" -m mark --mark 0x00004000/0x00004000 -j ACCEPT
	// -A SVCP-FORWARD -m comment --comment "svcproxy forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
	// COMMIT
	// *nat
	// :SVCP-SERVICES - [0:0]
	// :SVCP-NODEPORTS - [0:0]
	// :SVCP-POSTROUTING - [0:0]
	// :SVCP-MARK-MASQ - [0:0]
	// :SVCP-SVC-CDGGSHYLG3RE2FKL - [0:0]
	// :SVCP-SEP-VIDHDKFRU7YAZMR5 - [0:0]
	// :SVCP-SEP-4DRJRB6QQEGQJZEC - [0:0]
	// :SVCP-SEP-SC3FA6EQLWOQWHZK - [0:0]
	// -A SVCP-SERVICES -m comment --comment "default/web:http cluster IP" -m tcp -p tcp -d 198.18.0.20 --dport 80 -j SVCP-SVC-CDGGSHYLG3RE2FKL
	// -A SVCP-SERVICES -m comment --comment "svcproxy service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j SVCP-NODEPORTS
	// -A SVCP-POSTROUTING -m mark ! --mark 0x00004000/0x00004000 -j RETURN
	// -A SVCP-POSTROUTING -j MARK --xor-mark 0x00004000
	// -A SVCP-POSTROUTING -m comment --comment "svcproxy service traffic requiring SNAT" -j MASQUERADE --random-fully
	// -A SVCP-MARK-MASQ -j MARK --or-mark 0x00004000
	// -A SVCP-SVC-CDGGSHYLG3RE2FKL -m comment --comment "default/web:http cluster IP" -m tcp -p tcp -d 198.18.0.20 --dport 80 ! -s 198.19.0.0/17 -j SVCP-MARK-MASQ
	// -A SVCP-SVC-CDGGSHYLG3RE2FKL -m comment --comment "default/web:http -> 198.19.1.10:8080" -m statistic --mode random --probability 0.3333333333 -j SVCP-SEP-VIDHDKFRU7YAZMR5
	// -A SVCP-SVC-CDGGSHYLG3RE2FKL -m comment --comment "default/web:http -> 198.19.1.11:8080" -m statistic --mode random --probability 0.5000000000 -j SVCP-SEP-4DRJRB6QQEGQJZEC
	// -A SVCP-SVC-CDGGSHYLG3RE2FKL -m comment --comment "default/web:http -> 198.19.1.12:8080" -j SVCP-SEP-SC3FA6EQLWOQWHZK
	// -A SVCP-SEP-VIDHDKFRU7YAZMR5 -m comment --comment "default/web:http" -s 198.19.1.10 -j SVCP-MARK-MASQ
	// -A SVCP-SEP-VIDHDKFRU7YAZMR5 -m comment --comment "default/web:http" -m tcp -p tcp -j DNAT --to-destination 198.19.1.10:8080
	// -A SVCP-SEP-4DRJRB6QQEGQJZEC -m comment --comment "default/web:http" -s 198.19.1.11 -j SVCP-MARK-MASQ
	// -A SVCP-SEP-4DRJRB6QQEGQJZEC -m comment --comment "default/web:http" -m tcp -p tcp -j DNAT --to-destination 198.19.1.11:8080
	// -A SVCP-SEP-SC3FA6EQLWOQWHZK -m comment --comment "default/web:http" -s 198.19.1.12 -j SVCP-MARK-MASQ
	// -A SVCP-SEP-SC3FA6EQLWOQWHZK -m comment --comment "default/web:http" -m tcp -p tcp -j DNAT --to-destination 198.19.1.12:8080
	// COMMIT
}

// A packet's way through the rules, as the kernel would walk them: the rules
// of a sync are loaded into kernel/iptables' Fake, which traces a packet from
// a pod (198.19.1.2) to web's ClusterIP. Pick: 1 makes the random choices pick
// the second endpoint.
func Example_trace() {
	ipt := kiptables.NewFake()
	ipt.SetLocalAddrs(netip.MustParseAddr("198.19.0.1")) // the node
	p, err := iptables.New(iptables.Config{Node: dataplane.Node{NodeName: "node", ClusterCIDR: netip.MustParsePrefix("198.19.0.0/17")}, IPTables: ipt})
	if err != nil {
		panic(err)
	}
	if err := p.Sync(context.Background(), snapshot(web)); err != nil {
		panic(err)
	}
	for _, pkt := range []kiptables.Packet{
		{Src: netip.MustParseAddr("198.19.1.2"), Dst: netip.MustParseAddrPort("198.18.0.20:80"), InIface: "veth-client", Pick: 1},
		{Src: netip.MustParseAddr("198.19.200.2"), Dst: netip.MustParseAddrPort("198.18.0.20:80"), InIface: "eth1"},
	} {
		tr, err := ipt.Trace(pkt)
		if err != nil {
			panic(err)
		}
		fmt.Println(tr)
	}
	// Output:
	// tcp 198.19.1.2 -> 198.18.0.20:80, arriving on veth-client
	//   nat/PREROUTING                 -m comment --comment "svcproxy service portals" -j SVCP-SERVICES
	//   nat/SVCP-SERVICES              -d 198.18.0.20/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j SVCP-SVC-CDGGSHYLG3RE2FKL
	//   nat/SVCP-SVC-CDGGSHYLG3RE2FKL  -m comment --comment "default/web:http -> 198.19.1.10:8080" -m statistic --mode random --probability 0.33333333330 -j SVCP-SEP-VIDHDKFRU7YAZMR5  => random: not taken (p=0.6667)
	//   nat/SVCP-SVC-CDGGSHYLG3RE2FKL  -m comment --comment "default/web:http -> 198.19.1.11:8080" -m statistic --mode random --probability 0.50000000000 -j SVCP-SEP-4DRJRB6QQEGQJZEC  => random: taken (p=0.5)
	//   nat/SVCP-SEP-4DRJRB6QQEGQJZEC  -p tcp -m comment --comment default/web:http -m tcp -j DNAT --to-destination 198.19.1.11:8080  => DNAT 198.19.1.11:8080
	//   filter/FORWARD                 -m comment --comment "svcproxy forwarding rules" -j SVCP-FORWARD
	//   filter/FORWARD                 -m comment --comment "svcproxy externally-visible service portals" -j SVCP-EXTERNAL-SERVICES
	//   filter/FORWARD                 -m comment --comment "svcproxy service portals" -j SVCP-SERVICES
	//   filter/FORWARD                 policy ACCEPT
	//   nat/POSTROUTING                -m comment --comment "svcproxy postrouting rules" -j SVCP-POSTROUTING
	//   nat/SVCP-POSTROUTING           -m mark ! --mark 0x4000/0x4000 -j RETURN  => RETURN
	//   nat/POSTROUTING                policy ACCEPT
	// result: DNAT 198.19.1.11:8080 (p=0.3333)
	//
	// tcp 198.19.200.2 -> 198.18.0.20:80, arriving on eth1
	//   nat/PREROUTING                 -m comment --comment "svcproxy service portals" -j SVCP-SERVICES
	//   nat/SVCP-SERVICES              -d 198.18.0.20/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j SVCP-SVC-CDGGSHYLG3RE2FKL
	//   nat/SVCP-SVC-CDGGSHYLG3RE2FKL  ! -s 198.19.0.0/17 -d 198.18.0.20/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j SVCP-MARK-MASQ
	//   nat/SVCP-MARK-MASQ             -j MARK --set-xmark 0x4000/0x4000  => mark 0x4000
	//   nat/SVCP-SVC-CDGGSHYLG3RE2FKL  -m comment --comment "default/web:http -> 198.19.1.10:8080" -m statistic --mode random --probability 0.33333333330 -j SVCP-SEP-VIDHDKFRU7YAZMR5  => random: taken (p=0.3333)
	//   nat/SVCP-SEP-VIDHDKFRU7YAZMR5  -p tcp -m comment --comment default/web:http -m tcp -j DNAT --to-destination 198.19.1.10:8080  => DNAT 198.19.1.10:8080
	//   filter/FORWARD                 -m comment --comment "svcproxy forwarding rules" -j SVCP-FORWARD
	//   filter/SVCP-FORWARD            -m comment --comment "svcproxy forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT  => ACCEPT
	//   nat/POSTROUTING                -m comment --comment "svcproxy postrouting rules" -j SVCP-POSTROUTING
	//   nat/SVCP-POSTROUTING           -j MARK --set-xmark 0x4000/0x0  => mark 0x0
	//   nat/SVCP-POSTROUTING           -m comment --comment "svcproxy service traffic requiring SNAT" -j MASQUERADE --random-fully  => MASQUERADE
	// result: DNAT 198.19.1.10:8080, MASQUERADE (p=0.3333)
}
