package kubeproxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/internal/k8sbin"
)

// kube-proxy's full sync comes every proxyutil.FullSyncPeriod, a constant
// (an hour in v1.37.2: pkg/proxy/util/utils.go): no flag or configuration
// shortens it. The benchmark shortens both proxies' equally, so a run of
// minutes holds a periodic full sync: svcproxy's with --full-sync-period,
// kube-proxy's in a build of its own, v1.37.2 from the same module as
// internal/k8sbin's with that one constant changed. Go refuses an overlay
// of a file in the module cache, so the build sees k8s.io/kubernetes
// through a replace directive, in a temporary directory whose files are
// links to the module cache's but for the one patched (nothing of
// Kubernetes' source is kept in this repository). The binary is cached
// beside the other programs.

// fullSyncConst is the line the overlay replaces.
const fullSyncConst = "FullSyncPeriod = 1 * time.Hour"

// kubeProxyFullSync returns kube-proxy v1.37.2 built with FullSyncPeriod
// set to period, from the cache or built into it first.
func kubeProxyFullSync(ctx context.Context, root string, period time.Duration, stock k8sbin.Binaries) (string, error) {
	modDir := filepath.Join(root, "test", "kapi", "cluster")
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := goOutput(ctx, modDir, env, "list", "-m", "-f", "{{.Dir}} {{.Version}}", "k8s.io/kubernetes")
	if err != nil {
		return "", err
	}
	src, version, _ := strings.Cut(strings.TrimSpace(out), " ")
	file := filepath.Join(src, "pkg", "proxy", "util", "utils.go")
	orig, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	if strings.Count(string(orig), fullSyncConst) != 1 {
		return "", fmt.Errorf("%s: %q not found once: kube-proxy %s is not the one this overlay was written for", file, fullSyncConst, version)
	}
	patched := strings.Replace(string(orig), fullSyncConst,
		fmt.Sprintf("FullSyncPeriod = %d * time.Millisecond // svcproxy's bench/kubeproxy: shortened from 1 * time.Hour", period.Milliseconds()), 1)
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(modDir, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	h.Write([]byte(patched))
	dir := filepath.Join(filepath.Dir(filepath.Dir(stock.KubeProxy)),
		fmt.Sprintf("kube-proxy-%s-fullsync-%s_%s", version, period, hex.EncodeToString(h.Sum(nil))[:12]))
	bin := filepath.Join(dir, "kube-proxy")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	work, err := os.MkdirTemp("", "svcp-kube-proxy-build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	k8s := filepath.Join(work, "kubernetes")
	if err := linkTree(src, k8s, map[string][]byte{filepath.Join("pkg", "proxy", "util", "utils.go"): []byte(patched)}); err != nil {
		return "", err
	}
	mod := filepath.Join(work, "module")
	if err := os.Mkdir(mod, 0o755); err != nil {
		return "", err
	}
	for _, f := range []string{"go.mod", "go.sum", "tools.go"} {
		b, err := os.ReadFile(filepath.Join(modDir, f))
		if err != nil {
			return "", err
		}
		if f == "go.mod" {
			b = append(b, []byte("\nreplace k8s.io/kubernetes => ../kubernetes\n")...)
		}
		if err := os.WriteFile(filepath.Join(mod, f), b, 0o644); err != nil {
			return "", err
		}
	}
	// As internal/k8sbin builds kube-proxy: -trimpath, the release's
	// version stamped (hack/lib/version.sh), so /version says v1.37.2.
	const pkg = "k8s.io/component-base/version"
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	ldflags := fmt.Sprintf("-X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s -X %[1]s.gitTreeState=clean",
		pkg, version, major, minor)
	fmt.Fprintf(os.Stderr, "bench/kubeproxy: building kube-proxy %s with FullSyncPeriod %s (minutes when cold)\n", version, period)
	if _, err := goOutput(ctx, mod, env, "build", "-trimpath", "-ldflags", ldflags,
		"-o", filepath.Join(tmp, "kube-proxy"), "k8s.io/kubernetes/cmd/kube-proxy"); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	return bin, os.Rename(tmp, dir)
}

// linkTree makes dst a tree of directories like src's whose files are
// symbolic links to src's, but for those of replace (by path under src),
// which are written with the content given.
func linkTree(src, dst string, replace map[string][]byte) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case replace[rel] != nil:
			return os.WriteFile(to, replace[rel], 0o644)
		default:
			return os.Symlink(path, to)
		}
	})
}

func goOutput(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
