package ruletest

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// CheckGolden compares got with testdata/<name>.golden, or rewrites the file
// with go test -update. what says what got is, as a reader meets it: "as
// iptables-restore reads it".
func CheckGolden(t *testing.T, name, what string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	t.Logf("%s, %s:\n%s", path, what, got)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s: differs from the golden file (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

// Renderer renders snap for node as a path writes it: iptables-restore text,
// an nft transaction.
type Renderer func(node dataplane.Node, snap *service.Snapshot) ([]byte, error)

// CheckRenderGolden renders, for the test cluster's node, the Snapshots both
// paths keep golden files of: none, a ClusterIP, a port without endpoints,
// traffic policies Local with and without a local endpoint. Each is
// compared with the path's testdata/<name>.golden (CheckGolden; rendered
// says what the text is). Each path's TestRenderGolden renders its own.
func CheckRenderGolden(t *testing.T, render Renderer, rendered string) {
	remoteOnly := []service.Endpoint{st.Endpoint("198.19.1.130:8080", "node-b")}
	for _, c := range []struct {
		name string // the golden file's
		snap *service.Snapshot
	}{
		{"empty", st.Snapshot()},
		{"clusterip", st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()))},
		{"no-endpoints", st.Snapshot(st.Service("web", "198.18.0.10", 80, nil,
			st.WithNodePort(30080), st.WithExternalIPs("198.18.100.1"), st.WithLoadBalancer("198.18.200.1")))},
		{"external-local", st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(),
			st.WithNodePort(30080), st.WithExternalLocal()))},
		{"external-local-none-here", st.Snapshot(st.Service("web", "198.18.0.10", 80, remoteOnly,
			st.WithNodePort(30080), st.WithExternalIPs("198.18.100.1"), st.WithExternalLocal()))},
		{"internal-local-none-here", st.Snapshot(st.Service("web", "198.18.0.10", 80, remoteOnly, st.WithInternalLocal()))},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := render(Options{}.Node(false), c.snap)
			if err != nil {
				t.Fatal(err)
			}
			CheckGolden(t, c.name, rendered, got)
		})
	}
}

// FamilyRender is a node whose rules of FamiliesSnapshot each path keeps as
// a golden file.
type FamilyRender struct {
	Name string
	Node dataplane.Node
}

// FamilyRenders are the nodes both paths render FamiliesSnapshot for: the
// test cluster's node in each family, and an IPv6 one whose NodePorts
// answer on listed addresses, of both families and loopback (only its own
// family's, not loopback, may take them).
func FamilyRenders() []FamilyRender {
	return []FamilyRender{
		{"dual-stack-ipv4", Options{}.Node(false)},
		{"dual-stack-ipv6", Options{Family: service.IPv6}.Node(false)},
		{"dual-stack-ipv6-node-ips", dataplane.Node{Family: service.IPv6, NodeName: st.ThisNode,
			NodePortIPs: st.Addrs("198.19.0.1", "2001:db8:19::1", "::1")}},
	}
}

// CheckFamiliesGolden renders FamiliesSnapshot for each of FamilyRenders,
// compares it with the path's golden file of that name, and checks that it
// names only addresses of the node's family.
func CheckFamiliesGolden(t *testing.T, render Renderer, rendered string) {
	snap := FamiliesSnapshot()
	for _, tt := range FamilyRenders() {
		t.Run(tt.Name, func(t *testing.T) {
			got, err := render(tt.Node, snap)
			if err != nil {
				t.Fatal(err)
			}
			CheckGolden(t, tt.Name, rendered, got)
			other := " 2001:db8:"
			if tt.Node.Family == service.IPv6 {
				other = " 198.1"
			}
			for line := range strings.Lines(string(got)) {
				if strings.Contains(line, other) {
					t.Errorf("an address of the other family: %s", line)
				}
			}
		})
	}
}

// CheckInvalidNodes: render refuses, for an empty Snapshot, every node that
// is not one: a masquerade bit out of 0..31, an invalid NodePort address, a
// node IP or a pod network of the other family (saying which field), an
// unknown family.
func CheckInvalidNodes(t *testing.T, render Renderer) {
	refused := func(n dataplane.Node) error {
		_, err := render(n, st.Snapshot())
		return err
	}
	for _, n := range []dataplane.Node{{MasqueradeBit: 32}, {MasqueradeBit: -1}, {NodePortIPs: []netip.Addr{{}}},
		{NodeIP: netip.MustParseAddr("2001:db8:19::1")}, {Family: service.IPv6, NodeIP: netip.MustParseAddr("198.19.0.1")},
		{Family: "IPv5"}} {
		if err := refused(n); err == nil {
			t.Errorf("node %+v: no error", n)
		}
	}
	err := refused(dataplane.Node{Family: service.IPv6, ClusterCIDR: netip.MustParsePrefix("198.19.0.0/16")})
	if err == nil || !strings.Contains(err.Error(), "ClusterCIDR 198.19.0.0/16: not an IPv6 prefix") {
		t.Errorf("IPv6 rules with an IPv4 ClusterCIDR: %v", err)
	}
}
