package kind_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/images/kindnode"
	"github.com/svcproxy/svcproxy/internal/k8sbin"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/testbin"
	"github.com/svcproxy/svcproxy/lab/kind"
)

// TestKindSmoke is `make kind-up` and `make kind-down` in a state directory
// and engine of its own: kind v0.33.0 makes deploy/kind/cluster.yaml's
// three nodes from the cached node image, svcproxy's image (built here) is
// loaded and deploy/kind applied (lab/kind/overlay); from a pod on each worker a name
// resolves through clusterdns and its Service answers through svcproxy;
// then nothing is left.
func TestKindSmoke(t *testing.T) {
	netnstest.RequireRoot(t, "nsenter", "unshare", "mount")
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("needs dockerd (Debian's docker.io; make deps)")
	}
	cache, err := kindnode.DefaultCacheDir()
	if err != nil {
		t.Skip(err)
	}
	node := kindnode.CachedArchive(cache)
	if _, err := os.Stat(node); err != nil {
		t.Skipf("no cached kind node image (%v): make kind-image", err)
	}
	bins, err := k8sbin.Build(context.Background(), k8sbin.Config{ControlPlane: true, Kind: true, Conformance: true, CachedOnly: true})
	if errors.Is(err, k8sbin.ErrNotBuilt) {
		t.Skipf("kind, kubectl or agnhost not built (%v): make kind-bin conformance-bins", err)
	} else if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	dir := t.TempDir()
	bin := testbin.Build(t, "./cmd/runc-capbound")
	svcproxyImage := filepath.Join(dir, "svcproxy-image.tar")
	mk := exec.Command("go", "run", "./deploy/image/mkimage", "-o", svcproxyImage)
	mk.Dir = "../.."
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("mkimage: %v\n%s", err, out)
	}
	agnhost, err := images.Write(dir, images.Config{Agnhost: bins.Agnhost}, []images.Spec{agnhostSpec(t)})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("../..")
	c := kind.New(kind.Config{
		StateDir: "/run/kindlab-test", EngineName: "kindlab-test",
		Kind: bins.Kind, Kubectl: bins.Kubectl, Runc: filepath.Join(bin, "runc-capbound"),
		NodeImage: node, SvcproxyImage: svcproxyImage,
		ClusterConfig: filepath.Join(root, "deploy/kind/cluster.yaml"),
		Kustomization: filepath.Join(root, "lab/kind/overlay"),
		// Beside another cluster, wait a little for it to go, within ctx.
		InotifyWait: 2 * time.Minute,
		Log:         tlog{t},
	})
	// One smoke test at a time on a machine; what a killed one left is
	// removed first.
	lock, err := os.OpenFile("/run/lock/kindlab-test.lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/kindlab-test"); err == nil {
		t.Log("removing what an earlier smoke test left")
		if err := c.Down(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := c.Down(context.Background()); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat("/run/netns/kindlab-test"); err == nil {
			t.Error("the engine's network namespace is left")
		}
	})
	start := time.Now()
	if err := c.Up(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("up in %s", time.Since(start).Round(100*time.Millisecond))
	lines, err := c.Check(ctx, agnhost[0], images.AgnhostRef)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 {
		t.Errorf("checked %d workers, want deploy/kind/cluster.yaml's 2", len(lines))
	}
}

func agnhostSpec(t *testing.T) images.Spec {
	for _, s := range images.All() {
		if s.Ref == images.AgnhostRef {
			return s
		}
	}
	t.Fatal("no agnhost image")
	return images.Spec{}
}

// tlog writes the steps to the test's log.
type tlog struct{ t *testing.T }

func (l tlog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
