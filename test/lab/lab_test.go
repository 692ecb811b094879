package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/testbin"
	"github.com/svcproxy/svcproxy/lab"
)

func TestMain(m *testing.M) {
	unlock := lockLab()
	code := testbin.Main(m)
	unlock()
	os.Exit(code)
}

// labLock serialises test runs on one machine: the lab's namespaces and
// state directory have fixed names, so two `go test ./test/lab` at once (two
// checkouts, or a `make lab` next to a test) would tear down each other's lab.
const labLock = "/run/lock/svclab-test.lock"

// lockLab waits for labLock and returns its release. Without permission to
// make the file (not root) the lab tests skip anyway, and nothing is locked.
func lockLab() (unlock func()) {
	f, err := os.OpenFile(labLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return func() {}
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		fmt.Fprintf(os.Stderr, "test/lab: another lab test holds %s; waiting for it\n", labLock)
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			fmt.Fprintf(os.Stderr, "test/lab: lock %s: %v; running without it\n", labLock, err)
		}
	}
	return func() { f.Close() }
}

// build compiles svclab, svcproxy, clusterdns and runc-capbound into one
// directory, as `go build -o bin/ ./cmd/...` does (once per test binary),
// and returns it.
func build(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "./cmd/svclab", "./cmd/svcproxy", "./cmd/clusterdns", "./cmd/runc-capbound")
}

// requireClean fails the test for anything of the lab left on the machine:
// namespaces, mounts, /etc/netns files, the state directory, and processes
// started from the test's binaries.
func requireClean(t *testing.T, bin string) {
	t.Helper()
	l, err := lab.New(lab.Config{})
	if err != nil {
		t.Fatal(err)
	}
	left := l.Leftovers()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(bin)) {
			left = append(left, "process "+filepath.Dir(p)+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if len(left) > 0 {
		t.Errorf("the lab left behind:\n  %s", strings.Join(left, "\n  "))
	}
}

// svclab runs the built svclab with args and returns its combined output.
func svclab(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "svclab"), args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// down removes the lab whatever state a failed test left it in.
func down(t *testing.T, bin string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := svclab(ctx, bin, "down"); err != nil {
		t.Errorf("svclab down: %v\n%s", err, out)
	}
}

func TestDemo(t *testing.T) {
	netnstest.RequireRoot(t, lab.DemoTools...)
	bin := build(t)
	t.Cleanup(func() { down(t, bin) })
	// The file-fed demo must finish well under two minutes (the README's
	// promise: once built, the demo takes seconds); on a control plane (when
	// make kapi built it) its start comes first. The timeout only keeps a
	// hang from eating the suite's budget.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	out, err := svclab(ctx, bin, "demo")
	if err != nil {
		t.Fatalf("svclab demo: %v\n%s", err, out)
	}
	if !strings.Contains(out, "steps saw what they expected") {
		t.Fatalf("svclab demo exited 0 without its summary:\n%s", out)
	}
	t.Logf("svclab demo:\n%s", out)
	requireClean(t, bin)
}
