package watch

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

// nodeYAML is a v1 Node named name in zone (no label when ""), with spec as
// the lines of its spec (indented two spaces; "": no taints).
func nodeYAML(name, zone, spec string) string {
	if spec == "" {
		spec = "  taints: []\n"
	}
	labels := "{kubernetes.io/hostname: " + name + "}"
	if zone != "" {
		labels = "{kubernetes.io/hostname: " + name + ", topology.kubernetes.io/zone: " + zone + "}"
	}
	return fmt.Sprintf("apiVersion: v1\nkind: Node\nmetadata:\n  name: %s\n  labels: %s\nspec:\n%s", name, labels, spec)
}

const autoscalerTaint = "  taints:\n  - {key: ToBeDeletedByClusterAutoscaler, value: \"1733200000\", effect: NoSchedule}\n"

// describeNode prints what a Snapshot holds of this node: "<none>", or
// "node-a zone=zone-1 deleting=false toBeDeleted=false".
func describeNode(n *service.Node) string {
	if n == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s zone=%s deleting=%t toBeDeleted=%t", n.Name, n.Zone(), n.Deleting, n.ToBeDeleted)
}

// TestBuildNode: of a manifests file's Nodes, the one named as this node is
// the Snapshot's Node; the others are ignored, and without a node name there
// is none.
func TestBuildNode(t *testing.T) {
	two := svcYAML + "---\n" + nodeYAML("node-a", "zone-1", "") + "---\n" + nodeYAML("node-b", "zone-2", "")
	tests := []struct {
		name, nodeName, data, want string
	}{
		{"this node among others", "node-a", two, "node-a zone=zone-1 deleting=false toBeDeleted=false"},
		{"the other one", "node-b", two, "node-b zone=zone-2 deleting=false toBeDeleted=false"},
		{"not in the file", "node-c", two, "<none>"},
		{"no node name: no Node", "", two, "<none>"},
		{"no zone label", "node-a", nodeYAML("node-a", "", ""), "node-a zone= deleting=false toBeDeleted=false"},
		{"the autoscaler's taint", "node-a", nodeYAML("node-a", "zone-1", autoscalerTaint),
			"node-a zone=zone-1 deleting=false toBeDeleted=true"},
		{"deletion timestamp", "node-a",
			strings.Replace(nodeYAML("node-a", "zone-1", ""), "  name: node-a\n", "  name: node-a\n  deletionTimestamp: \"2026-12-03T08:00:00Z\"\n", 1),
			"node-a zone=zone-1 deleting=true toBeDeleted=false"},
		{"in a List", "node-b",
			`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-b","labels":{"topology.kubernetes.io/zone":"zone-9"}}}]}`,
			"node-b zone=zone-9 deleting=false toBeDeleted=false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := LoadManifests("f.yaml", []byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			snap := build(objs, selection{nodeName: tt.nodeName})
			if got := describeNode(snap.Node()); got != tt.want {
				t.Errorf("Node = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestFileSourceFollowsNode: a change of this node's Node in the file, and
// of nothing else, publishes a new Snapshot; a change of another Node does
// not build one.
func TestFileSourceFollowsNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	file := func(zoneA, zoneB, specA string) string {
		return manifest(80) + "---\n" + nodeYAML("node-a", zoneA, specA) + "---\n" + nodeYAML("node-b", zoneB, "")
	}
	writeFile(t, path, file("zone-1", "zone-2", ""))
	w, err := New(Config{ServicesFile: path, NodeName: "node-a", MinSyncPeriod: 1, ResyncPeriod: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	snaps := start(t, w)
	hasNode := func(want string) func(*service.Snapshot) bool {
		return func(s *service.Snapshot) bool { return portsOf(s) == "80" && describeNode(s.Node()) == want }
	}
	await(t, snaps, "node-a in zone-1", hasNode("node-a zone=zone-1 deleting=false toBeDeleted=false"))

	replaceFile(t, path, file("zone-3", "zone-2", ""))
	await(t, snaps, "node-a moved to zone-3", hasNode("node-a zone=zone-3 deleting=false toBeDeleted=false"))

	built := w.built.Load()
	replaceFile(t, path, file("zone-3", "zone-4", ""))
	// The file source reloads, finds no change and builds nothing; the
	// next change shows that the one before it was read.
	replaceFile(t, path, file("zone-3", "zone-5", autoscalerTaint))
	await(t, snaps, "node-a tainted", hasNode("node-a zone=zone-3 deleting=false toBeDeleted=true"))
	if got := w.built.Load() - built; got != 1 {
		t.Errorf("%d Snapshots built for one change of this node and two of another node, want 1", got)
	}
}

// TestNodeTracker: only a change of what a Snapshot holds of the Node
// counts as a change; a deleted Node stays, marked Deleting.
func TestNodeTracker(t *testing.T) {
	ct := newChangeTracker()
	n := &nodeTracker{changes: ct}
	node := func(zone string) *cachedNode {
		return &cachedNode{cacheMeta: cacheMeta{name: "node-a"},
			obj: &service.Node{Name: "node-a", Labels: map[string]string{"topology.kubernetes.io/zone": zone}}}
	}
	steps := []struct {
		name    string
		event   func()
		want    string
		changed bool
	}{
		{"add", func() { n.OnAdd(node("zone-1"), true) }, "node-a zone=zone-1 deleting=false toBeDeleted=false", true},
		{"status update only", func() { n.OnUpdate(node("zone-1"), node("zone-1")) }, "node-a zone=zone-1 deleting=false toBeDeleted=false", false},
		{"zone label", func() { n.OnUpdate(node("zone-1"), node("zone-2")) }, "node-a zone=zone-2 deleting=false toBeDeleted=false", true},
		{"delete", func() { n.OnDelete(node("zone-2")) }, "node-a zone=zone-2 deleting=true toBeDeleted=false", true},
		{"delete again (tombstone)", func() { n.OnDelete(nil) }, "node-a zone=zone-2 deleting=true toBeDeleted=false", false},
		{"created again", func() { n.OnAdd(node("zone-3"), false) }, "node-a zone=zone-3 deleting=false toBeDeleted=false", true},
	}
	for _, s := range steps {
		gen := ct.gen.Load()
		s.event()
		if got := describeNode(n.get()); got != s.want {
			t.Errorf("%s: Node = %s, want %s", s.name, got, s.want)
		}
		if changed := ct.gen.Load() != gen; changed != s.changed {
			t.Errorf("%s: changed = %t, want %t", s.name, changed, s.changed)
		}
	}
}
