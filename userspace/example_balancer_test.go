package userspace_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/exampletest"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
	"github.com/svcproxy/svcproxy/userspace"
)

// twoServices are web (round-robin) and web-sticky (ClientIP affinity for 10
// minutes), each in front of the same three pods.
const twoServices = `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 198.18.0.20
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
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
metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [198.19.1.10]}, {addresses: [198.19.1.11]}, {addresses: [198.19.1.12]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-sticky-1, labels: {kubernetes.io/service-name: web-sticky}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [198.19.1.10]}, {addresses: [198.19.1.11]}, {addresses: [198.19.1.12]}]
`

// fakeClock is a clock the example moves by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// The Balancer picks an endpoint for each new connection: round-robin over the
// usable endpoints, in the Snapshot's order; with ClientIP affinity, the
// endpoint a client got first, until it has been idle for the Service's
// timeout.
func ExampleBalancer() {
	snap, err := watch.SnapshotOf("services.yaml", []byte(twoServices))
	if err != nil {
		panic(err)
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	b := userspace.NewBalancer(clock)
	b.Update(snap.Ports())

	web := service.PortName{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"}, Port: "http", Protocol: service.TCP}
	sticky := web
	sticky.Name = "web-sticky"
	alice := netip.MustParseAddr("198.19.1.2")
	bob := netip.MustParseAddr("198.19.1.3")

	fmt.Println("web, round-robin:")
	for i := 1; i <= 4; i++ {
		ep, _ := b.Pick(web, alice)
		fmt.Printf("  connection %d from alice -> %s\n", i, ep)
	}
	fmt.Println("web-sticky, ClientIP affinity:")
	for _, c := range []struct {
		who  string
		addr netip.Addr
	}{{"alice", alice}, {"bob", bob}, {"alice", alice}, {"bob", bob}} {
		ep, _ := b.Pick(sticky, c.addr)
		fmt.Printf("  %-5s -> %s\n", c.who, ep)
	}
	clock.now = clock.now.Add(10 * time.Minute) // alice's affinity has expired
	ep, _ := b.Pick(sticky, alice)
	fmt.Printf("  alice, 10 minutes later -> %s (round-robin again)\n", ep)
	// Output:
	// web, round-robin:
	//   connection 1 from alice -> 198.19.1.10:8080
	//   connection 2 from alice -> 198.19.1.11:8080
	//   connection 3 from alice -> 198.19.1.12:8080
	//   connection 4 from alice -> 198.19.1.10:8080
	// web-sticky, ClientIP affinity:
	//   alice -> 198.19.1.10:8080
	//   bob   -> 198.19.1.11:8080
	//   alice -> 198.19.1.10:8080
	//   bob   -> 198.19.1.11:8080
	//   alice, 10 minutes later -> 198.19.1.12:8080 (round-robin again)
}

// TestExampleBalancer logs what ExampleBalancer prints: go test -v shows a test's log, never an
// Example's output (internal/exampletest).
func TestExampleBalancer(t *testing.T) { exampletest.Log(t, ExampleBalancer) }
