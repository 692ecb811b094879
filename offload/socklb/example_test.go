package socklb_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/exampletest"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/offload/socklb"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// A Service with three endpoints, rendered into the hooks' maps, and a
// connect() from a pod in the cgroup walked through connect4: the socket is
// connected to an endpoint, and no packet of it will ever be translated.
func ExampleMaps() {
	lb := ksocklb.NewFake()
	p, err := socklb.NewMaps(socklb.Config{LB: lb, Node: dataplane.Node{NodeName: st.ThisNode}})
	if err != nil {
		panic(err)
	}
	snap := st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()))
	if err := p.Sync(context.Background(), snap); err != nil {
		panic(err)
	}
	_, trace := lb.Connect(ksocklb.Client{NetnsCookie: 4097, Random: 7}, ksocklb.TCP, netip.MustParseAddrPort("198.18.0.10:80"))
	fmt.Print(trace)
	// Output:
	// connect4 TCP 198.18.0.10:80, netns cookie 4097, socket cookie 0
	//   services  lookup 198.18.0.10:80/TCP  => id 1, 3 backends
	//   backends  lookup (id 1, slot 1)  => 198.19.1.11:8080 (random 7 % 3)
	//   revnat    update (socket 0, 198.19.1.11:8080)  => = 198.18.0.10:80
	//   ctx       user_ip, user_port  => = 198.19.1.11:8080
	// result: rewritten to 198.19.1.11:8080
}

// TestExampleMaps logs what ExampleMaps prints: go test -v shows a test's
// log, never an Example's output.
func TestExampleMaps(t *testing.T) { exampletest.Log(t, ExampleMaps) }
