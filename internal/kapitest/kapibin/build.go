package kapibin

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
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// ErrUnavailable is wrapped by Build's error when the go command or the module
// proxy cannot be reached: tests skip on it instead of failing.
var ErrUnavailable = errors.New("cannot build kube-apiserver and etcd here")

// Binaries are the paths of the two built programs.
type Binaries struct {
	APIServer string // kube-apiserver
	Etcd      string // etcd
	// Key names the versions: "kube-apiserver-v1.37.2_etcd-v3.6.16_<hash>".
	Key string
}

// Config says where the sources and the cache are. The zero value is usable.
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
}

// ErrNotBuilt is Build's error with CachedOnly when the binaries are not cached.
var ErrNotBuilt = errors.New("kube-apiserver and etcd are not built yet")

// module is one of the nested modules under test/kapi and the command it builds.
type module struct {
	dir     string                      // under test/kapi
	dep     string                      // the module that holds the command; its version is in the key
	pkg     string                      // the command's package
	out     string                      // the binary's file name
	ldflags func(version string) string // nil: none
}

var modules = []module{
	{
		dir: "apiserver", dep: "k8s.io/kubernetes", pkg: "k8s.io/kubernetes/cmd/kube-apiserver", out: "kube-apiserver",
		ldflags: kubeLDFlags,
	},
	{
		dir: "etcd", dep: "go.etcd.io/etcd/server/v3", pkg: "go.etcd.io/etcd/server/v3", out: "etcd",
	},
}

// kubeLDFlags stamps what the Kubernetes release build stamps
// (hack/lib/version.sh), so that /version reports v1.37.2 and not v0.0.0-master.
func kubeLDFlags(version string) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	const pkg = "k8s.io/component-base/version"
	return fmt.Sprintf("-X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s -X %[1]s.gitTreeState=clean",
		pkg, version, major, minor)
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
	key, versions, err := cacheKey(kapiDir)
	if err != nil {
		return Binaries{}, err
	}
	cacheDir := cfg.CacheDir
	if cacheDir == "" {
		userCache, err := os.UserCacheDir()
		if err != nil {
			userCache = os.TempDir() // no $HOME (a bare CI user): still cache
		}
		cacheDir = filepath.Join(userCache, "svcproxy", "kapi")
	}
	dir := filepath.Join(cacheDir, key)
	bins := Binaries{
		APIServer: filepath.Join(dir, "kube-apiserver"),
		Etcd:      filepath.Join(dir, "etcd"),
		Key:       key,
	}
	if complete(dir) {
		return bins, nil
	}
	if cfg.CachedOnly {
		return Binaries{}, fmt.Errorf("%w (looked in %s)", ErrNotBuilt, dir)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("kapi cache: %w", err)
	}
	unlock, err := lock(ctx, filepath.Join(cacheDir, key+".lock"), cfg.Log)
	if err != nil {
		return Binaries{}, err
	}
	defer unlock()
	if complete(dir) { // another process built it while we waited
		return bins, nil
	}
	if err := build(ctx, kapiDir, dir, versions, cfg.Log); err != nil {
		return Binaries{}, err
	}
	return bins, nil
}

// complete reports whether dir holds a finished build: build renames the
// directory into place only once every binary is in it.
func complete(dir string) bool {
	for _, m := range modules {
		if fi, err := os.Stat(filepath.Join(dir, m.out)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// build compiles every module into a temporary directory next to dir, then
// renames it to dir, so that a killed build never leaves a half cache.
func build(ctx context.Context, kapiDir, dir string, versions map[string]string, log io.Writer) error {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("%w: go command: %w", ErrUnavailable, err)
	}
	// Under the lock, leftovers of builds that died are nobody's.
	stale, _ := filepath.Glob(dir + ".tmp-*")
	for _, d := range stale {
		os.RemoveAll(d)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("kapi cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, m := range modules {
		modDir := filepath.Join(kapiDir, m.dir)
		version := versions[m.dep]
		// Asking for the one module first tells "no proxy" (skip) apart from
		// "the build is broken" (fail).
		if out, err := goRun(ctx, goCmd, modDir, "mod", "download", m.dep); err != nil {
			return fmt.Errorf("%w: go mod download %s@%s: %w\n%s", ErrUnavailable, m.dep, version, err, out)
		}
		fmt.Fprintf(log, "kapibin: building %s %s into %s (a cold build takes minutes)\n", m.out, version, dir)
		start := time.Now()
		args := []string{"build", "-trimpath", "-o", filepath.Join(tmp, m.out)}
		if m.ldflags != nil {
			args = append(args, "-ldflags", m.ldflags(version))
		}
		out, err := goRun(ctx, goCmd, modDir, append(args, m.pkg)...)
		log.Write(out)
		if err != nil {
			return fmt.Errorf("go build %s@%s: %w\n%s", m.pkg, version, err, out)
		}
		fmt.Fprintf(log, "kapibin: built %s in %s\n", m.out, time.Since(start).Round(time.Second))
	}
	if err := os.WriteFile(filepath.Join(tmp, "VERSIONS"), []byte(fmt.Sprintln(versions)), 0o644); err != nil {
		return fmt.Errorf("kapi cache: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return fmt.Errorf("kapi cache: %w", err)
	}
	os.RemoveAll(dir) // an incomplete leftover, if any
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("kapi cache: %w", err)
	}
	return nil
}

// goRun runs the go command in a nested module. GOWORK=off and -mod=readonly
// keep a developer's workspace or GOFLAGS from changing what is built.
func goRun(ctx context.Context, goCmd, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
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
	fmt.Fprintf(log, "kapibin: waiting for another process building into %s\n", strings.TrimSuffix(path, ".lock"))
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

// cacheKey names a build by the pinned versions and a hash of the nested
// modules' go.mod and go.sum files (and the platform).
func cacheKey(kapiDir string) (string, map[string]string, error) {
	h := sha256.New()
	fmt.Fprintln(h, runtime.GOOS, runtime.GOARCH)
	versions := make(map[string]string)
	var name []string
	for _, m := range modules {
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
				name = append(name, m.out+"-"+v)
			}
		}
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
