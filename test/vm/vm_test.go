package vm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestIPVS runs the tests of test/vm/guest inside a VM with Debian's kernel, which has
// IPVS. $SVCPROXY_VM_RUN narrows them like -run does.
func TestIPVS(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("needs linux/amd64 (the guest kernel is Debian's amd64 one)")
	}
	for _, tool := range []string{"qemu-system-x86_64", "apt-get", "apt-cache", "dpkg", "depmod", "busybox", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (packages qemu-system-x86, apt, dpkg, kmod, busybox-static, and Go): %v", tool, err)
		}
	}
	// The budget: the kernel download and unpack once (~15 s), the guest build, then a
	// boot plus tests of about a minute under TCG on two shared cores.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cache, err := DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	k, err := FetchKernel(ctx, cache)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	bin := buildGuestTest(ctx, t, work, "./guest")

	cmd := []string{"/bin/guest.test", "-test.v", "-test.timeout=150s"}
	if r := os.Getenv("SVCPROXY_VM_RUN"); r != "" {
		cmd = append(cmd, "-test.run="+r)
	}
	g := Guest{Modules: IPVSModules, Files: map[string]string{"/bin/guest.test": bin}, Command: cmd}
	res, err := Run(ctx, k, g, work, func(l string) { t.Log("guest| " + l) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s: boot %s, boot+tests %s", k.Version, res.Boot.Round(100*time.Millisecond), res.Total.Round(100*time.Millisecond))
	if res.ExitCode != 0 {
		t.Fatalf("guest tests failed (exit code %d; -1: no result line, see the console above)", res.ExitCode)
	}
	for _, l := range res.Console {
		if strings.Contains(l, "--- SKIP") {
			t.Errorf("guest test skipped in the VM: %s", strings.TrimSpace(l))
		}
	}
}

// buildGuestTest compiles a test package into a static binary for the guest.
func buildGuestTest(ctx context.Context, t *testing.T, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, "guest.test")
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c %s: %v\n%s", pkg, err, b)
	}
	return out
}
