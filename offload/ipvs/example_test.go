package ipvs_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/exampletest"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/kernel/link"
	"github.com/svcproxy/svcproxy/offload/ipvs"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// A NodePort Service with three endpoints, reconciled into IPVS: the
// ClusterIP goes on the dummy interface (IPVS sees a packet only once the
// routing decision found its destination local), and each address the
// Service answers on gets a virtual server whose real servers are the
// endpoints; the scheduler (round-robin) picks one per new connection,
// and no rule is walked. Then an endpoint goes away while it still carries
// two connections: it stays at weight 0, taking no new connection, until
// they end.
func Example() {
	ctx := context.Background()
	ipvsKernel, links := kipvs.NewFake(), link.NewFake()
	d, err := ipvs.New(ipvs.Config{
		IPVS: ipvsKernel, Links: links,
		Node: dataplane.Node{NodeName: st.ThisNode, NodePortIPs: st.Addrs("198.19.0.1")},
	})
	if err != nil {
		panic(err)
	}
	web := st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithNodePort(30080))
	if err := d.Sync(ctx, st.Snapshot(web)); err != nil {
		panic(err)
	}
	fmt.Print(links.Dump())
	fmt.Print(ipvsKernel.Dump())

	clusterIP := kipvs.Key{Protocol: kipvs.TCP, Addr: netip.MustParseAddrPort("198.18.0.10:80")}
	leaving := netip.MustParseAddrPort("198.19.1.130:8080")
	if err := ipvsKernel.SetConns(clusterIP, leaving, 2, 0); err != nil {
		panic(err)
	}
	web.Ports[0].Endpoints = web.Ports[0].Endpoints[:2]
	if err := d.Sync(ctx, st.Snapshot(web)); err != nil {
		panic(err)
	}
	fmt.Println("\nafter 198.19.1.130 left, with two connections open:")
	fmt.Print(ipvsKernel.Dump())
	// Output:
	// svcp-ipvs0 dummy up 198.18.0.10/32
	// Prot LocalAddress:Port Scheduler Flags
	//   -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
	// TCP  198.18.0.10:80 rr
	//   -> 198.19.1.10:8080             Masq    1      0          0
	//   -> 198.19.1.11:8080             Masq    1      0          0
	//   -> 198.19.1.130:8080            Masq    1      0          0
	// TCP  198.19.0.1:30080 rr
	//   -> 198.19.1.10:8080             Masq    1      0          0
	//   -> 198.19.1.11:8080             Masq    1      0          0
	//   -> 198.19.1.130:8080            Masq    1      0          0
	//
	// after 198.19.1.130 left, with two connections open:
	// Prot LocalAddress:Port Scheduler Flags
	//   -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
	// TCP  198.18.0.10:80 rr
	//   -> 198.19.1.10:8080             Masq    1      0          0
	//   -> 198.19.1.11:8080             Masq    1      0          0
	//   -> 198.19.1.130:8080            Masq    0      2          0
	// TCP  198.19.0.1:30080 rr
	//   -> 198.19.1.10:8080             Masq    1      0          0
	//   -> 198.19.1.11:8080             Masq    1      0          0
}

// TestExample logs what Example prints: go test -v shows a test's log,
// never an Example's output.
func TestExample(t *testing.T) { exampletest.Log(t, Example) }
