package watch

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

// TestFileNamespacesAndPods: a manifests file's namespaces are its Namespace
// documents' and every object's; its pods' addresses those of the pods that
// have not finished. Without Namespaces and Pods the Snapshot has neither.
func TestFileNamespacesAndPods(t *testing.T) {
	const manifests = `
apiVersion: v1
kind: Namespace
metadata: {name: empty}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: team-a}
spec:
  clusterIP: 198.18.0.10
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: team-b}
spec: {containers: [{name: web, image: web}]}
status: {phase: Running, podIP: 198.19.0.7}
---
apiVersion: v1
kind: Pod
metadata: {name: job, namespace: team-b}
spec: {containers: [{name: job, image: job}]}
status: {phase: Succeeded, podIP: 198.19.0.8}
`
	path := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(path, []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, both := range []bool{true, false} {
		w, err := New(Config{ServicesFile: path, Namespaces: both, Pods: both})
		if err != nil {
			t.Fatal(err)
		}
		snap := await(t, start(t, w), "first Snapshot", func(*service.Snapshot) bool { return true })
		if !both {
			if snap.Namespaces() != nil || snap.PodIPs() != nil {
				t.Errorf("without Namespaces and Pods: %v %v", snap.Namespaces(), snap.PodIPs())
			}
			continue
		}
		ns := snap.Namespaces()
		for _, want := range []string{"empty", "team-a", "team-b"} {
			if !ns.Has(want) {
				t.Errorf("namespaces %v lack %s", ns, want)
			}
		}
		if pods := snap.PodIPs(); !pods.Has(netip.MustParseAddr("198.19.0.7"), "team-b") ||
			pods.Has(netip.MustParseAddr("198.19.0.8"), "team-b") || pods.Has(netip.MustParseAddr("198.19.0.7"), "team-a") {
			t.Errorf("pods %v: want 198.19.0.7 in team-b only", pods)
		}
	}
}
