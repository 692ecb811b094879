package nftables_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/dataplane"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/offload/nftables"
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

// Where iptables walks SVCP-SERVICES rule by rule, nftables looks the packet's
// destination up in one verdict map, service-ips (a hash table: the same cost
// for one Service or ten thousand), and goes straight to the port's chain;
// there one numgen rule per endpoint picks the DNAT. The rules of a sync are
// loaded into kernel/nftables' Fake, which traces a packet from a pod and one
// from outside the cluster (masqueraded); Pick: 2 makes the random choices
// pick the third endpoint.
func Example_trace() {
	snap, err := watch.SnapshotOf("services.yaml", []byte(web))
	if err != nil {
		panic(err)
	}
	nft := knft.NewFake(nftables.Table)
	nft.SetLocalAddrs(netip.MustParseAddr("198.19.0.1")) // the node
	p, err := nftables.New(nftables.Config{Node: dataplane.Node{NodeName: "node", ClusterCIDR: netip.MustParsePrefix("198.19.0.0/17")}, NFT: nft})
	if err != nil {
		panic(err)
	}
	if err := p.Sync(context.Background(), snap); err != nil {
		panic(err)
	}
	for _, pkt := range []knft.Packet{
		{Src: netip.MustParseAddr("198.19.1.2"), Dst: netip.MustParseAddrPort("198.18.0.20:80"), Pick: 2},
		{Src: netip.MustParseAddr("198.19.200.2"), Dst: netip.MustParseAddrPort("198.18.0.20:80")},
	} {
		tr, err := nft.Trace(pkt)
		if err != nil {
			panic(err)
		}
		fmt.Println(tr)
	}
	// Output:
	// tcp 198.19.1.2 -> 198.18.0.20:80, arriving from outside
	//   filter-prerouting                      ct state new jump firewall-check
	//   nat-prerouting                         jump services
	//   services                               ip daddr . meta l4proto . th dport vmap @service-ips  => 198.18.0.20 . tcp . 80 : goto service-SUSTUHLJ-default/web/tcp/http
	//   service-SUSTUHLJ-default/web/tcp/http  numgen random mod 3 == 0 meta l4proto tcp dnat to 198.19.1.10:8080  => random: not taken (p=0.6667)
	//   service-SUSTUHLJ-default/web/tcp/http  numgen random mod 2 == 0 meta l4proto tcp dnat to 198.19.1.11:8080  => random: not taken (p=0.5)
	//   service-SUSTUHLJ-default/web/tcp/http  meta l4proto tcp dnat to 198.19.1.12:8080  => DNAT 198.19.1.12:8080
	//   filter-forward                         ct state new jump service-endpoints-check
	//   filter-forward                         ct state new jump cluster-ips-check
	//   nat-postrouting                        jump masquerading
	//   masquerading                           mark and 0x00004000 == 0 return
	// result: DNAT 198.19.1.12:8080 (p=0.3333)
	//
	// tcp 198.19.200.2 -> 198.18.0.20:80, arriving from outside
	//   filter-prerouting                      ct state new jump firewall-check
	//   nat-prerouting                         jump services
	//   services                               ip daddr . meta l4proto . th dport vmap @service-ips  => 198.18.0.20 . tcp . 80 : goto service-SUSTUHLJ-default/web/tcp/http
	//   service-SUSTUHLJ-default/web/tcp/http  ip daddr 198.18.0.20 tcp dport 80 ip saddr != 198.19.0.0/17 jump mark-for-masquerade
	//   mark-for-masquerade                    mark set mark or 0x00004000  => mark 0x4000
	//   service-SUSTUHLJ-default/web/tcp/http  numgen random mod 3 == 0 meta l4proto tcp dnat to 198.19.1.10:8080  => random: taken (p=0.3333); DNAT 198.19.1.10:8080
	//   filter-forward                         ct state new jump service-endpoints-check
	//   filter-forward                         ct state new jump cluster-ips-check
	//   nat-postrouting                        jump masquerading
	//   masquerading                           mark set mark xor 0x00004000  => mark 0x0
	//   masquerading                           masquerade fully-random  => MASQUERADE
	// result: DNAT 198.19.1.10:8080, MASQUERADE (p=0.3333)
}
