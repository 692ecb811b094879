package kindnode

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCRIBaseSpec checks kind's two changes to `ctr oci spec`: its hook
// appended to createContainer, the rlimits removed.
func TestCRIBaseSpec(t *testing.T) {
	in := `{"ociVersion":"1.0.2","process":{"args":["sh"],"rlimits":[{"type":"RLIMIT_NOFILE","hard":1024,"soft":1024}]},
	 "hooks":{"createContainer":[{"path":"/other"}]}}`
	out, err := criBaseSpec([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Process map[string]any
		Hooks   struct{ CreateContainer []struct{ Path string } }
	}
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Process["rlimits"]; ok {
		t.Errorf("rlimits kept: %s", out)
	}
	if s.Process["args"] == nil {
		t.Errorf("process.args lost: %s", out)
	}
	hooks := s.Hooks.CreateContainer
	if len(hooks) != 2 || hooks[0].Path != "/other" || hooks[1].Path != "/kind/bin/mount-product-files.sh" {
		t.Errorf("createContainer hooks %+v, want /other then kind's", hooks)
	}
}

// TestCNIManifest reads kind's manifest from the module (when the module
// cache holds sigs.k8s.io/kind v0.33.0) and checks that only the image
// changed: kind still templates and patches it.
func TestCNIManifest(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skip("no go command:", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "sigs.k8s.io", "kind@v0.33.0")
	if _, err := os.Stat(dir); err != nil {
		t.Skip("sigs.k8s.io/kind v0.33.0 is not in the module cache (make kind-bin)")
	}
	m, err := CNIManifest(dir, "svcproxy.test/kindnetd:dev")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"would you kindly template this file", "would you kindly patch this file",
		"image: svcproxy.test/kindnetd:dev", "value: {{ .PodSubnet }}", "name: kindnet-cni", "mountPath: /etc/cni/net.d"} {
		if !strings.Contains(m, want) {
			t.Errorf("manifest lacks %q", want)
		}
	}
	if strings.Contains(m, "kindest/kindnetd") || strings.Contains(m, "`") {
		t.Errorf("manifest still names kindnetd's image or ends badly:\n%s", m)
	}
}
