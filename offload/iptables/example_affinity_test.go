package iptables_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/exampletest"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/offload/iptables"
)

// webSticky is web with ClientIP session affinity for 600 seconds.
const webSticky = `apiVersion: v1
kind: Service
metadata: {name: web-sticky}
spec:
  clusterIP: 198.18.0.21
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 600}}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-sticky-1, labels: {kubernetes.io/service-name: web-sticky}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [198.19.1.10], nodeName: node}
- {addresses: [198.19.1.11], nodeName: node}
- {addresses: [198.19.1.12], nodeName: node}
`

// ClientIP affinity in iptables mode is the recent match: the SVCP-SEP- chain
// that DNATs a client --sets its address on a list named after the chain, and
// the SVCP-SVC- chain first --rchecks each endpoint's list, so the client's
// next new connection (whatever the random choice would say) goes to the same
// pod, until the client has been quiet for the timeout. The kernel/iptables
// Fake keeps the lists and a clock, so the trace shows each step.
func Example_affinity() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ipt := kiptables.NewFake()
	ipt.Now = func() time.Time { return now }
	ipt.SetLocalAddrs(netip.MustParseAddr("198.19.0.1"))
	p, err := iptables.New(iptables.Config{Node: dataplane.Node{NodeName: "node", ClusterCIDR: netip.MustParsePrefix("198.19.0.0/17")}, IPTables: ipt})
	if err != nil {
		panic(err)
	}
	if err := p.Sync(context.Background(), snapshot(webSticky)); err != nil {
		panic(err)
	}
	connect := func(what string, pick int) {
		tr, err := ipt.Trace(kiptables.Packet{
			Src: netip.MustParseAddr("198.19.1.2"), Dst: netip.MustParseAddrPort("198.18.0.21:80"),
			InIface: "veth-client", Pick: pick,
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: DNAT %s\n", what, tr.DNAT)
		for _, s := range tr.Steps {
			if strings.Contains(s.Rule, "-m recent") && s.Note != "" {
				fmt.Printf("  %s  => %s\n", s.Chain, s.Note)
			}
		}
	}
	connect("first connection, random pick 2", 2)
	now = now.Add(time.Minute)
	connect("a minute later, random pick 0", 0)
	now = now.Add(11 * time.Minute)
	connect("after 11 quiet minutes, random pick 0", 0)
	// Output:
	// first connection, random pick 2: DNAT 198.19.1.12:8080
	//   SVCP-SEP-URJAZDLNUENYJF6O  => DNAT 198.19.1.12:8080; recent SVCP-SEP-URJAZDLNUENYJF6O: set 198.19.1.2
	// a minute later, random pick 0: DNAT 198.19.1.12:8080
	//   SVCP-SVC-ECL5JCJ5G54Z6IJU  => recent SVCP-SEP-URJAZDLNUENYJF6O: 198.19.1.2 seen 1m0s ago
	//   SVCP-SEP-URJAZDLNUENYJF6O  => DNAT 198.19.1.12:8080; recent SVCP-SEP-URJAZDLNUENYJF6O: set 198.19.1.2
	// after 11 quiet minutes, random pick 0: DNAT 198.19.1.10:8080
	//   SVCP-SEP-7RK3ZMUNCISJTK6S  => DNAT 198.19.1.10:8080; recent SVCP-SEP-7RK3ZMUNCISJTK6S: set 198.19.1.2
}

// TestExample_affinity logs what Example_affinity prints: go test -v shows a test's log, never an
// Example's output (internal/exampletest).
func TestExample_affinity(t *testing.T) { exampletest.Log(t, Example_affinity) }
