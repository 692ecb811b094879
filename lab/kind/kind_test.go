package kind_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/internal/k8sbin"
	"github.com/svcproxy/svcproxy/internal/testbin"
	"github.com/svcproxy/svcproxy/lab/kind"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// TestMergeHostPatch checks that the host patch's lists are appended to a
// cluster configuration's and that deploy/kind/cluster.yaml keeps the rest.
func TestMergeHostPatch(t *testing.T) {
	cluster, err := os.ReadFile("../../deploy/kind/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := kind.MergeHostPatch(cluster, kind.HostPatch)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Name                    string
		Networking              map[string]string
		Nodes                   []map[string]string
		KubeadmConfigPatches    []string `json:"kubeadmConfigPatches"`
		ContainerdConfigPatches []string `json:"containerdConfigPatches"`
	}
	if err := yaml.Unmarshal(out, &c); err != nil {
		t.Fatal(err)
	}
	if c.Name != "kind" || c.Networking["kubeProxyMode"] != "none" || len(c.Nodes) != 3 {
		t.Errorf("cluster.yaml's settings lost:\n%s", out)
	}
	if c.Networking["podSubnet"] != kind.PodSubnet || c.Networking["serviceSubnet"] != kind.ServiceSubnet {
		t.Errorf("networking: %q, want podSubnet %s and serviceSubnet %s", c.Networking, kind.PodSubnet, kind.ServiceSubnet)
	}
	if len(c.KubeadmConfigPatches) != 3 || !strings.Contains(c.KubeadmConfigPatches[0], "failCgroupV1: false") {
		t.Errorf("kubeadmConfigPatches: %q", c.KubeadmConfigPatches)
	}
	if len(c.ContainerdConfigPatches) != 1 || !strings.Contains(c.ContainerdConfigPatches[0], "restrict_oom_score_adj = true") {
		t.Errorf("containerdConfigPatches: %q", c.ContainerdConfigPatches)
	}
	if _, err := kind.MergeHostPatch(cluster, []byte("nodes: []\n")); err == nil {
		t.Error("a patch that sets nodes was merged")
	}
}

// TestHostPatchKubeadm checks the host patch's kubeadm patches (longer
// timeouts for a loaded machine) with kubeadm v1.37.2 itself: `kubeadm
// config validate` decodes strictly, so a misspelt field fails here rather
// than in kind create cluster. kind matches each patch to its document of
// the same apiVersion and kind (kubeadm.k8s.io/v1beta4 for Kubernetes
// v1.37).
func TestHostPatchKubeadm(t *testing.T) {
	var patch struct {
		KubeadmConfigPatches []string `json:"kubeadmConfigPatches"`
	}
	if err := yaml.Unmarshal(kind.HostPatch, &patch); err != nil {
		t.Fatal(err)
	}
	// What each kubeadm document needs beside the patch to be valid.
	need := map[string]string{
		"InitConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.37.2\n",
		"JoinConfiguration": "", // the discovery below
	}
	var docs []string
	for _, p := range patch.KubeadmConfigPatches {
		var tm struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(p), &tm); err != nil {
			t.Fatalf("patch %q: %v", p, err)
		}
		if !strings.HasPrefix(tm.APIVersion, "kubeadm.k8s.io/") {
			continue
		}
		if tm.APIVersion != "kubeadm.k8s.io/v1beta4" {
			t.Errorf("patch for %s %s: kind v0.33.0 writes kubeadm.k8s.io/v1beta4 for Kubernetes v1.37, so it would match nothing", tm.APIVersion, tm.Kind)
		}
		extra, ok := need[tm.Kind]
		if !ok {
			t.Errorf("patch for %s: kind writes no such kubeadm document", tm.Kind)
			continue
		}
		if tm.Kind == "JoinConfiguration" {
			p += "discovery:\n  bootstrapToken:\n    apiServerEndpoint: kind-control-plane:6443\n" +
				"    token: abcdef.0123456789abcdef\n    unsafeSkipCAVerification: true\n"
		}
		docs = append(docs, extra+"---\n"+p)
	}
	if len(docs) != 2 {
		t.Fatalf("%d kubeadm patches, want the InitConfiguration's and the JoinConfiguration's timeouts", len(docs))
	}
	bins, err := k8sbin.Build(context.Background(), k8sbin.Config{Cluster: true, CachedOnly: true})
	if errors.Is(err, k8sbin.ErrNotBuilt) {
		t.Skipf("kubeadm not built (%v): make cluster-bins", err)
	} else if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		f := filepath.Join(t.TempDir(), "kubeadm.yaml")
		if err := os.WriteFile(f, []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bins.Kubeadm, "config", "validate", "--config", f).CombinedOutput(); err != nil {
			t.Errorf("kubeadm config validate: %v\n%s\n%s", err, out, d)
		}
	}
}

// TestRanges checks that every range the lab gives kind's cluster is in the
// project's test ranges (Services 198.18.0.0/16; pods and nodes
// 198.19.0.0/16, 2001:db8:19::/64) and that they do not overlap.
func TestRanges(t *testing.T) {
	services := netip.MustParsePrefix("198.18.0.0/16")
	nodes4 := netip.MustParsePrefix("198.19.0.0/16")
	nodes6 := netip.MustParsePrefix("2001:db8:19::/64")
	within := func(name, s string, in netip.Prefix) netip.Prefix {
		p := netip.MustParsePrefix(s)
		if p.Masked() != p || p.Bits() < in.Bits() || !in.Contains(p.Addr()) {
			t.Errorf("%s %s is not a range in %s", name, s, in)
		}
		return p
	}
	within("ServiceSubnet", kind.ServiceSubnet, services)
	pods := within("PodSubnet", kind.PodSubnet, nodes4)
	node := within("NodeSubnet", kind.NodeSubnet, nodes4)
	within("NodeSubnet6", kind.NodeSubnet6, nodes6)
	if pods.Overlaps(node) {
		t.Errorf("PodSubnet %s overlaps NodeSubnet %s", pods, node)
	}
}

// TestOverlay checks that lab/kind/overlay is deploy/kind with svcproxy's
// cluster-cidr set to the pod range the host patch gives the cluster, as
// kubectl kustomize renders it.
func TestOverlay(t *testing.T) {
	bins, err := k8sbin.Build(context.Background(), k8sbin.Config{ControlPlane: true, CachedOnly: true})
	if errors.Is(err, k8sbin.ErrNotBuilt) {
		t.Skipf("kubectl not built (%v): make kapi", err)
	} else if err != nil {
		t.Fatal(err)
	}
	render := func(dir string) []map[string]any {
		t.Helper()
		out, err := exec.Command(bins.Kubectl, "kustomize", dir).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		var objs []map[string]any
		for _, doc := range strings.Split(string(out), "\n---\n") {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatal(err)
			}
			objs = append(objs, o)
		}
		return objs
	}
	kindObjs, overlay := render("../../deploy/kind"), render("overlay")
	if len(kindObjs) != len(overlay) {
		t.Fatalf("overlay: %d objects, deploy/kind %d", len(overlay), len(kindObjs))
	}
	var patch struct{ Networking map[string]string }
	if err := yaml.Unmarshal(kind.HostPatch, &patch); err != nil {
		t.Fatal(err)
	}
	if patch.Networking["podSubnet"] != kind.PodSubnet || patch.Networking["serviceSubnet"] != kind.ServiceSubnet {
		t.Errorf("host patch networking %q, want podSubnet %s, serviceSubnet %s", patch.Networking, kind.PodSubnet, kind.ServiceSubnet)
	}
	for i, o := range overlay {
		meta, _ := o["metadata"].(map[string]any)
		if o["kind"] != "ConfigMap" || meta["name"] != "svcproxy" {
			if d := cmpYAML(t, kindObjs[i], o); d != "" {
				t.Errorf("overlay changes %s %s: %s", o["kind"], meta["name"], d)
			}
			continue
		}
		data := o["data"].(map[string]any)
		want := kindObjs[i]["data"].(map[string]any)
		want["cluster-cidr"] = kind.PodSubnet
		if d := cmpYAML(t, want, data); d != "" {
			t.Errorf("overlay's ConfigMap svcproxy: %s", d)
		}
	}
}

// cmpYAML is "" when a and b marshal the same, else both.
func cmpYAML(t *testing.T, a, b any) string {
	t.Helper()
	ay, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	by, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(ay) == string(by) {
		return ""
	}
	return "want\n" + string(ay) + "got\n" + string(by)
}

// TestNodeCount checks the number of nodes Up waits for: deploy/kind's
// three, or kind's one control-plane node when a configuration names none.
func TestNodeCount(t *testing.T) {
	one := filepath.Join(t.TempDir(), "one.yaml")
	if err := os.WriteFile(one, []byte("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"../../deploy/kind/cluster.yaml": 3, one: 1} {
		if n, err := kind.NodeCount(path); err != nil || n != want {
			t.Errorf("NodeCount(%s) = %d, %v; want %d", path, n, err, want)
		}
	}
}

// TestInotifyFree checks that an inotify instance this process holds is
// counted as used.
func TestInotifyFree(t *testing.T) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Skipf("no inotify instance to hold: %v", err)
	}
	defer unix.Close(fd)
	free, limit, err := kind.InotifyFree()
	if err != nil {
		t.Fatal(err)
	}
	if limit < 1 || free < 0 || free > limit-1 {
		t.Errorf("InotifyFree() = %d free of %d while this test holds one", free, limit)
	}
	t.Logf("%d of %d inotify instances free; a three-node kind cluster holds about %d", free, limit, kind.InotifyInstances(3))
}

// TestWaitInotify checks that Up's wait for inotify instances returns once
// enough are free, says once that it waits, and names the limit when time
// runs out.
func TestWaitInotify(t *testing.T) {
	frees := []int{10, 20, 60}
	calls := 0
	free := func() (int, int, error) {
		n := frees[min(calls, len(frees)-1)]
		calls++
		return n, 128, nil
	}
	var log strings.Builder
	if err := kind.WaitInotify(context.Background(), 49, time.Minute, time.Millisecond, free, &log); err != nil {
		t.Fatalf("WaitInotify: %v", err)
	}
	if calls != 3 || strings.Count(log.String(), "waiting up to") != 1 {
		t.Errorf("%d calls, log %q: want 3 calls and one line saying it waits", calls, log.String())
	}
	calls, frees = 0, []int{39}
	err := kind.WaitInotify(context.Background(), 49, 20*time.Millisecond, time.Millisecond, free, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "39 of fs.inotify.max_user_instances (128) free") {
		t.Errorf("WaitInotify with too few free: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := kind.WaitInotify(ctx, 49, time.Minute, time.Millisecond, free, io.Discard); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitInotify, cancelled: %v", err)
	}
}
