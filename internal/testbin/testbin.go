// Package testbin builds svcproxy's commands for tests that run them as real
// processes (in network namespaces, under the lab), once per test binary.
//
//	func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }
//	...
//	dir := testbin.Build(t, "./cmd/svcproxy", "./cmd/clusterdns") // dir/svcproxy, dir/clusterdns
package testbin

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

var builds struct {
	mu   sync.Mutex
	dirs map[string]string // packages, space-joined -> directory
	all  []string
}

// Build compiles the packages (paths relative to the module root, as
// `go build -o DIR/ ./cmd/...` takes them) into one directory and returns it.
// The same packages are built once per test binary; Main removes the
// directories when the tests end.
func Build(t testing.TB, pkgs ...string) string {
	t.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	key := strings.Join(pkgs, " ")
	if dir, ok := builds.dirs[key]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "svcp-bin-")
	if err != nil {
		t.Fatal(err)
	}
	builds.all = append(builds.all, dir)
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = moduleRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", key, err, out)
	}
	if builds.dirs == nil {
		builds.dirs = map[string]string{}
	}
	builds.dirs[key] = dir
	return dir
}

// Main runs the tests, then removes what Build made.
func Main(m *testing.M) int {
	code := m.Run()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	for _, dir := range builds.all {
		os.RemoveAll(dir)
	}
	return code
}

func moduleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD: %v (%q): not inside the module", err, gomod)
	}
	return strings.TrimSuffix(gomod, "/go.mod")
}
