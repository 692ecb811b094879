package ruletest

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

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

// RenderCase is a Snapshot whose rules each path keeps as a golden file,
// rendered for the test cluster's node.
type RenderCase struct {
	Name string // the golden file's
	Snap *service.Snapshot
}

// RenderCases are the Snapshots both paths render for their golden files:
// none, a ClusterIP, a port without endpoints, traffic policies Local with
// and without a local endpoint. Each path's TestRenderGolden adds its own.
func RenderCases() []RenderCase {
	remoteOnly := []service.Endpoint{st.Endpoint("198.19.1.130:8080", "node-b")}
	return []RenderCase{
		{"empty", st.Snapshot()},
		{"clusterip", st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()))},
		{"no-endpoints", st.Snapshot(st.Service("web", "198.18.0.10", 80, nil,
			st.WithNodePort(30080), st.WithExternalIPs("198.18.100.1"), st.WithLoadBalancer("198.18.200.1")))},
		{"external-local", st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(),
			st.WithNodePort(30080), st.WithExternalLocal()))},
		{"external-local-none-here", st.Snapshot(st.Service("web", "198.18.0.10", 80, remoteOnly,
			st.WithNodePort(30080), st.WithExternalIPs("198.18.100.1"), st.WithExternalLocal()))},
		{"internal-local-none-here", st.Snapshot(st.Service("web", "198.18.0.10", 80, remoteOnly, st.WithInternalLocal()))},
	}
}
