package k8sbin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// ErrUnavailable is wrapped by Build's error when the go command or the module
// proxy cannot be reached: tests skip on it instead of failing.
var ErrUnavailable = errors.New("cannot build the Kubernetes programs here")

// Binaries are the paths of the built programs.
type Binaries struct {
	APIServer string // kube-apiserver
	Etcd      string // etcd
	// ControllerManager and Kubectl are set only with Config.ControlPlane.
	ControllerManager string // kube-controller-manager
	Kubectl           string // kubectl
	// Kubelet and Scheduler are set only with Config.Node.
	Kubelet   string // kubelet
	Scheduler string // kube-scheduler
	// E2ETest and Agnhost are set only with Config.Conformance.
	E2ETest string // e2e.test, Kubernetes' end-to-end tests
	Agnhost string // agnhost, the program of the e2e tests' images
	// Kubeadm and KubeProxy are set with Config.Cluster or Config.KubeProxy.
	Kubeadm   string // kubeadm
	KubeProxy string // kube-proxy
	// CoreDNS is set with Config.Cluster or Config.CoreDNS: CoreDNS at the
	// version kubeadm deploys, static.
	CoreDNS string
	// ClusterEtcd and ClusterEtcdctl are set with Config.Cluster: etcd and
	// etcdctl at the version kubeadm deploys, for its etcd image (Etcd is
	// the API server tests' own).
	ClusterEtcd    string
	ClusterEtcdctl string
	// Kind is set with Config.Kind: kind v0.33.0.
	Kind string
	// Key names the versions of kube-apiserver and etcd:
	// "kube-apiserver-v1.37.2_etcd-v3.6.16_<hash>".
	Key string
}

// Config says where the sources and the cache are, and what to build. The
// zero value is usable.
type Config struct {
	// RepoRoot is the directory of svcproxy's go.mod. If empty, it is found by
	// walking up from the working directory.
	RepoRoot string
	// CacheDir holds one directory per key. If empty, it is
	// os.UserCacheDir()/svcproxy/kapi ($XDG_CACHE_HOME or ~/.cache), or
	// os.TempDir()/svcproxy/kapi without a home directory.
	CacheDir string
	// Log receives progress lines and the go command's output. If nil, they
	// are discarded.
	Log io.Writer
	// CachedOnly returns ErrNotBuilt instead of building when the cache does
	// not hold the binaries yet.
	CachedOnly bool
	// ControlPlane asks for kube-controller-manager and kubectl as well (the
	// control-plane lab), besides kube-apiserver and etcd.
	ControlPlane bool
	// Node asks for kubelet and kube-scheduler as well (the real-node lab:
	// the kubelet runs pods, and the scheduler places the DaemonSet's).
	Node bool
	// Conformance asks for e2e.test and agnhost as well (Kubernetes' own
	// Service and DNS tests, and the program of the images they run).
	Conformance bool
	// Cluster asks for what a kubeadm cluster runs beyond the control
	// plane's and the node's programs: kubeadm and kube-proxy, and CoreDNS
	// and etcd (with etcdctl) at the versions kubeadm v1.37.2 deploys, the
	// programs of its images.
	Cluster bool
	// KubeProxy asks for kube-proxy (cached with kubeadm), CoreDNS for
	// CoreDNS alone: what the benchmarks against them need.
	KubeProxy, CoreDNS bool
	// Kind asks for kind as well (docs/kind.md).
	Kind bool
}

// ErrNotBuilt is Build's error with CachedOnly when the binaries are not cached.
var ErrNotBuilt = errors.New("the Kubernetes programs are not built yet")

// cached is one set resolved against the cache: its key, its directory, the
// versions of its modules.
type cached struct {
	set      set
	key, dir string
	versions map[string]string
}

// Build returns the cached binaries for the versions pinned under test/kapi,
// building them first if the cache does not have them. Concurrent callers, in
// this process or others, wait for one build.
func Build(ctx context.Context, cfg Config) (Binaries, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	root, err := repoRoot(cfg.RepoRoot)
	if err != nil {
		return Binaries{}, err
	}
	kapiDir := filepath.Join(root, "test", "kapi")
	cacheDir := cfg.CacheDir
	if cacheDir == "" {
		userCache, err := os.UserCacheDir()
		if err != nil {
			userCache = os.TempDir() // no $HOME (a bare CI user): still cache
		}
		cacheDir = filepath.Join(userCache, "svcproxy", "kapi")
	}
	sets := []set{apiServerSet}
	if cfg.ControlPlane {
		sets = append(sets, controlPlaneSet)
	}
	if cfg.Node {
		sets = append(sets, nodeSet)
	}
	if cfg.Conformance {
		sets = append(sets, conformanceSet)
	}
	if cfg.Cluster || cfg.KubeProxy {
		sets = append(sets, clusterSet)
	}
	if cfg.Cluster || cfg.CoreDNS {
		sets = append(sets, coreDNSSet)
	}
	if cfg.Cluster {
		sets = append(sets, clusterEtcdSet)
	}
	if cfg.Kind {
		sets = append(sets, kindSet)
	}
	var all, missing []cached
	for _, s := range sets {
		key, versions, err := cacheKey(kapiDir, s)
		if err != nil {
			return Binaries{}, err
		}
		c := cached{set: s, key: key, dir: filepath.Join(cacheDir, key), versions: versions}
		all = append(all, c)
		if !complete(c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		if cfg.CachedOnly {
			return Binaries{}, fmt.Errorf("%w (looked in %s)", ErrNotBuilt, missing[0].dir)
		}
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return Binaries{}, fmt.Errorf("kapi cache: %w", err)
		}
		// Locks are taken in the sets' order, so two builders never wait on
		// each other.
		for _, c := range missing {
			unlock, err := lock(ctx, filepath.Join(cacheDir, c.key+".lock"), cfg.Log)
			if err != nil {
				return Binaries{}, err
			}
			defer unlock()
		}
		var still []cached
		for _, c := range missing {
			if !complete(c) { // another process may have built it while we waited
				still = append(still, c)
			}
		}
		if err := build(ctx, kapiDir, still, cfg.Log); err != nil {
			return Binaries{}, err
		}
	}
	bins := Binaries{Key: all[0].key}
	for _, c := range all {
		for _, p := range c.set {
			*p.field(&bins) = filepath.Join(c.dir, p.out)
		}
	}
	return bins, nil
}

// complete reports whether a set's directory holds a finished build: build
// renames the directory into place only once every binary is in it.
func complete(c cached) bool {
	for _, p := range c.set {
		if fi, err := os.Stat(filepath.Join(c.dir, p.out)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// build compiles the programs of every set, one go build per module (so
// kube-controller-manager and kubectl share their compiled packages, and find
// those they share with kube-apiserver in the go build cache), into temporary
// directories next to the sets' own, then renames each into place, so that a
// killed build never leaves a half cache.
func build(ctx context.Context, kapiDir string, sets []cached, log io.Writer) error {
	if len(sets) == 0 {
		return nil
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("%w: go command: %w", ErrUnavailable, err)
	}
	work, err := os.MkdirTemp(filepath.Dir(sets[0].dir), "build.tmp-")
	if err != nil {
		return fmt.Errorf("kapi cache: %w", err)
	}
	defer os.RemoveAll(work)
	// Group the programs by module, in the order they are listed. Versions
	// are per module: two modules may pin one dependency at two versions
	// (the tests' etcd and kubeadm's).
	var mods []module
	byMod := map[string][]program{}
	version := map[string]string{}
	for _, c := range sets {
		for _, p := range c.set {
			if _, ok := byMod[p.mod.dir]; !ok {
				mods = append(mods, p.mod)
			}
			byMod[p.mod.dir] = append(byMod[p.mod.dir], p)
			version[p.mod.dir] = c.versions[p.mod.dep]
		}
	}
	for _, m := range mods {
		if err := buildModule(ctx, goCmd, filepath.Join(kapiDir, m.dir), m, version[m.dir], byMod[m.dir], work, log); err != nil {
			return err
		}
	}
	for _, c := range sets {
		if err := install(c, work); err != nil {
			return err
		}
	}
	return nil
}

// buildModule compiles the programs of module m into work: the commands in
// one go build, each test binary (go test -c), each program with an
// environment of its own and each whose file is not named by its package in
// a go command of its own.
func buildModule(ctx context.Context, goCmd, modDir string, m module, version string, progs []program, work string, log io.Writer) error {
	// Asking for the one module first tells "no proxy" (skip) apart from
	// "the build is broken" (fail).
	if out, err := goRun(ctx, goCmd, modDir, nil, "mod", "download", m.dep); err != nil {
		return fmt.Errorf("%w: go mod download %s@%s: %w\n%s", ErrUnavailable, m.dep, version, err, out)
	}
	var together, alone []program
	for _, p := range progs {
		if p.test || len(p.env) > 0 || path.Base(p.pkg) != p.out {
			alone = append(alone, p)
		} else {
			together = append(together, p)
		}
	}
	if len(together) > 0 {
		// One program: -o names the file. More: -o DIR/ names each by its
		// package, which is each program's name.
		out := filepath.Join(work, together[0].out)
		if len(together) > 1 {
			out = work + string(os.PathSeparator)
		}
		if err := compile(ctx, goCmd, modDir, m, version, []string{"build", "-o", out}, together, log); err != nil {
			return err
		}
	}
	for _, p := range alone {
		verb := []string{"build", "-o", filepath.Join(work, p.out)}
		if p.test {
			verb = []string{"test", "-c", "-o", filepath.Join(work, p.out)}
		}
		if err := compile(ctx, goCmd, modDir, m, version, verb, []program{p}, log); err != nil {
			return err
		}
	}
	return nil
}

// compile runs one go command (verb: build or test -c, with -o) for progs,
// which share their environment.
func compile(ctx context.Context, goCmd, modDir string, m module, version string, verb []string, progs []program, log io.Writer) error {
	var names, pkgs []string
	for _, p := range progs {
		names, pkgs = append(names, p.out), append(pkgs, p.pkg)
	}
	fmt.Fprintf(log, "k8sbin: building %s %s (a cold build takes minutes)\n", strings.Join(names, ", "), version)
	start := time.Now()
	args := append(verb, "-trimpath")
	if m.ldflags != nil {
		args = append(args, "-ldflags", m.ldflags(version))
	}
	b, err := goRun(ctx, goCmd, modDir, progs[0].env, append(args, pkgs...)...)
	log.Write(b)
	if err != nil {
		return fmt.Errorf("go %s %s@%s: %w\n%s", verb[0], strings.Join(pkgs, " "), version, err, b)
	}
	fmt.Fprintf(log, "k8sbin: built %s in %s\n", strings.Join(names, ", "), time.Since(start).Round(time.Second))
	return nil
}

// install moves a set's programs from work into a directory of their own,
// then renames that to the set's directory.
func install(c cached, work string) error {
	// Under the lock, leftovers of builds that died are nobody's.
	stale, _ := filepath.Glob(c.dir + ".tmp-*")
	for _, d := range stale {
		os.RemoveAll(d)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(c.dir), filepath.Base(c.dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("kapi cache: %w", err)
	}
	defer os.RemoveAll(tmp) // gone after the rename; otherwise a failure's leftover
	for _, p := range c.set {
		if err := os.Rename(filepath.Join(work, p.out), filepath.Join(tmp, p.out)); err != nil {
			return fmt.Errorf("kapi cache: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "VERSIONS"), []byte(fmt.Sprintln(c.versions)), 0o644); err != nil {
		return fmt.Errorf("kapi cache: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return fmt.Errorf("kapi cache: %w", err)
	}
	os.RemoveAll(c.dir) // an incomplete leftover, if any
	if err := os.Rename(tmp, c.dir); err != nil {
		return fmt.Errorf("kapi cache: %w", err)
	}
	return nil
}

// goRun runs the go command in a nested module, with env added to the
// environment. GOWORK=off and -mod=readonly keep a developer's workspace or
// GOFLAGS from changing what is built.
func goRun(ctx context.Context, goCmd, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly"), env...)
	// A build must not outlive its owner: a test binary that times out
	// would otherwise leave an orphaned go build (and, its lock released,
	// the next test would start a second one beside it). Packages already
	// compiled stay in the go build cache, so the next build goes on from there.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd.CombinedOutput()
}

// lock takes an exclusive flock on path, waiting while another process builds.
// Flock is released by the kernel when the holder dies, so a killed build never
// leaves the lock held.
func lock(ctx context.Context, path string, log io.Writer) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kapi cache lock: %w", err)
	}
	fd := int(f.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		return func() { f.Close() }, nil
	}
	fmt.Fprintf(log, "k8sbin: waiting for another process building into %s\n", strings.TrimSuffix(path, ".lock"))
	// A blocking Flock cannot be cancelled; poll so that ctx can stop the wait.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("kapi cache lock %s: %w", path, ctx.Err())
		case <-tick.C:
			if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
				return func() { f.Close() }, nil
			}
		}
	}
}

// cacheKey names a set by its programs' versions and a hash of their modules'
// go.mod and go.sum files (and the platform):
// "kube-apiserver-v1.37.2_etcd-v3.6.16_<hash>".
func cacheKey(kapiDir string, s set) (string, map[string]string, error) {
	h := sha256.New()
	fmt.Fprintln(h, runtime.GOOS, runtime.GOARCH)
	versions := make(map[string]string)
	var name []string
	hashed := map[string]bool{}
	for _, p := range s {
		m := p.mod
		if !hashed[m.dir] {
			hashed[m.dir] = true
			for _, f := range []string{"go.mod", "go.sum"} {
				b, err := os.ReadFile(filepath.Join(kapiDir, m.dir, f))
				if err != nil {
					return "", nil, fmt.Errorf("kapi module %s: %w", m.dir, err)
				}
				fmt.Fprintf(h, "%s/%s %d\n", m.dir, f, len(b))
				h.Write(b)
				if f == "go.mod" {
					v, err := requiredVersion(b, m.dep)
					if err != nil {
						return "", nil, fmt.Errorf("kapi module %s: go.mod: %w", m.dir, err)
					}
					versions[m.dep] = v
				}
			}
		}
		name = append(name, p.out+"-"+versions[m.dep])
	}
	sum := hex.EncodeToString(h.Sum(nil))[:12]
	return strings.Join(name, "_") + "_" + sum, versions, nil
}

// requiredVersion finds "dep vX.Y.Z" in a go.mod's require lines.
func requiredVersion(gomod []byte, dep string) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(f) >= 2 && f[0] == dep && strings.HasPrefix(f[1], "v") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("require %s: not found", dep)
}

// repoRoot returns dir, or the nearest directory above the working directory
// whose go.mod declares svcproxy's module.
func repoRoot(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("svcproxy repository: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && modulePath(b) == "github.com/svcproxy/svcproxy" {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("svcproxy repository: no go.mod of github.com/svcproxy/svcproxy above %s", wd)
		}
	}
}

// modulePath returns the path of a go.mod's module line.
func modulePath(gomod []byte) string {
	for line := range bytes.Lines(gomod) {
		if f := strings.Fields(string(line)); len(f) == 2 && f[0] == "module" {
			return f[1]
		}
	}
	return ""
}
