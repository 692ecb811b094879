package kind_test

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

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
	if len(c.KubeadmConfigPatches) != 1 || !strings.Contains(c.KubeadmConfigPatches[0], "failCgroupV1: false") {
		t.Errorf("kubeadmConfigPatches: %q", c.KubeadmConfigPatches)
	}
	if len(c.ContainerdConfigPatches) != 1 || !strings.Contains(c.ContainerdConfigPatches[0], "restrict_oom_score_adj = true") {
		t.Errorf("containerdConfigPatches: %q", c.ContainerdConfigPatches)
	}
	if _, err := kind.MergeHostPatch(cluster, []byte("nodes: []\n")); err == nil {
		t.Error("a patch that sets nodes was merged")
	}
}
