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
	requireVM(t)
	// The budget: the kernel download and unpack once (~15 s); the builds (the first
	// CGO_ENABLED=0 build of svcproxy compiles client-go anew: minutes on two busy
	// cores, seconds once cached); then a boot plus tests of ~25 s under TCG.
	ctx, k := testKernel(t, 10*time.Minute)
	work := t.TempDir()
	// The two builds share the two cores; together they take less than one after the
	// other, as each waits on its own link step.
	var svcproxy string
	built := make(chan struct{})
	go func() {
		defer close(built)
		svcproxy = goBuild(ctx, t, work, "svcproxy", "build", "github.com/svcproxy/svcproxy/cmd/svcproxy")
	}()
	bin := goBuild(ctx, t, work, "guest.test", "test", "-c", "./guest")
	<-built
	if svcproxy == "" || bin == "" {
		t.FailNow()
	}

	// The guest's own timeout only has to come before the host's (ctx), so
	// that a hung guest test prints its goroutines: under TCG on two busy
	// cores one svcproxy test with its --cleanup takes minutes, not seconds.
	cmd := []string{"/bin/guest.test", "-test.v", "-test.timeout=" + guestTimeout(ctx).String()}
	if r := os.Getenv("SVCPROXY_VM_RUN"); r != "" {
		cmd = append(cmd, "-test.run="+r)
	}
	g := Guest{
		Modules: IPVSModules,
		Files:   map[string]string{"/bin/guest.test": bin, "/bin/svcproxy": svcproxy},
		Command: cmd,
	}
	// svcproxy --mode ipvs masquerades with iptables rules and ip sets.
	if err := g.AddIPTables(); err != nil {
		t.Skipf("needs the host's iptables and ipset for the guest: %v", err)
	}
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

// requireVM skips the test where the VM cannot boot.
func requireVM(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("needs linux/amd64 (the guest kernel is Debian's amd64 one)")
	}
	for _, tool := range []string{"qemu-system-x86_64", "apt-get", "apt-cache", "dpkg", "depmod", "busybox", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (packages qemu-system-x86, apt, dpkg, kmod, busybox-static, and Go): %v", tool, err)
		}
	}
}

// testKernel fetches the guest kernel, under a context that ends after timeout or
// with the test.
func testKernel(t *testing.T, timeout time.Duration) (context.Context, *Kernel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	cache, err := DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	k, err := FetchKernel(ctx, cache)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, k
}

// goBuild runs `go build` or `go test -c` (args) into a static binary for the guest,
// dir/name. On failure it reports the error and returns "" (it may run on another
// goroutine than the test's: no t.Fatal).
func goBuild(ctx context.Context, t *testing.T, dir, name string, args ...string) string {
	out := filepath.Join(dir, name)
	// The flags are deploy/image's (-trimpath, -s -w, CGO_ENABLED=0): the
	// packages compiled for one are in the build cache for the other, so
	// `make test` compiles client-go without cgo once, not twice.
	args = append([]string{args[0], "-trimpath", "-ldflags=-s -w", "-o", out}, args[1:]...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
		return ""
	}
	return out
}

// guestTimeout is what is left of ctx for the guest's tests once the VM has
// booted (a minute and a half under load), at least 150s.
func guestTimeout(ctx context.Context) time.Duration {
	d := 150 * time.Second
	if deadline, ok := ctx.Deadline(); ok {
		d = max(d, time.Until(deadline)-90*time.Second)
	}
	return d.Round(time.Second)
}
