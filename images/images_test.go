package images_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/internal/k8sbin"
	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// commands are what each image must run, found through PATH: what the
// Service and DNS tests of Kubernetes v1.37.2 run in it (test/e2e/network,
// test/e2e/framework), and its entrypoint.
var commands = map[string][]string{
	"pause.tar":             {"/pause"},
	"busybox.tar":           {"sh", "echo", "sleep", "cat", "nc", "dd", "hostname"},
	"glibc-dns-testing.tar": {"sh", "dig", "getent", "test", "seq", "sleep", "echo"},
	"agnhost.tar": {"/agnhost", "/agnhost-2", "sh", "dig", "nslookup", "getent", "curl", "wget", "nc",
		"ip", "ss", "test", "seq", "sleep", "timeout", "hostname", "cat", "dd", "echo"},
	"nginx.tar": {"/agnhost"},
}

// versionArgv run in each image's root (chroot): each tool finds its
// libraries and starts.
var versionArgv = map[string][][]string{
	"pause.tar":             {{"/pause", "-v"}},
	"busybox.tar":           {{"sh", "-c", "seq 1 3 | wc -l"}},
	"glibc-dns-testing.tar": {{"dig", "-v"}, {"host", "-V"}, {"sh", "-c", "getent hosts localhost && seq 1 2"}},
	"agnhost.tar": {{"/agnhost", "--help"}, {"/agnhost-2", "--help"}, {"curl", "--version"},
		{"dig", "-v"}, {"ss", "-V"}, {"sh", "-c", "getent hosts localhost"},
		// In the tests' sh -c scripts, the Debian tools and not busybox's applets.
		{"sh", "-c", "ip -V | grep -q iproute2"}, {"sh", "-c", "wget --version | grep -q 'GNU Wget'"},
		{"sh", "-c", "nc -h 2>&1 | grep -q OpenBSD"}, {"sh", "-c", "nslookup -version 2>&1 | grep -q Debian"}},
	"nginx.tar": {{"/agnhost", "test-webserver", "--help"}},
}

var built struct {
	once  sync.Once
	dir   string
	files map[string]string // File -> archive
	specs map[string]images.Spec
	skip  string // why the agnhost images are missing
	err   error
}

// archives builds every image once per test binary, as `make e2e-images`
// does; the agnhost ones only when test/kapi's cache holds agnhost.
func archives(t *testing.T) (map[string]string, map[string]images.Spec) {
	t.Helper()
	for _, tool := range []string{"ldd", "/usr/bin/busybox", "/usr/bin/dig", "/usr/bin/host", "/usr/bin/curl", "/usr/bin/wget", "/usr/bin/nc.openbsd", "/usr/bin/ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s, from the Debian packages the images copy (make deps)", tool)
		}
	}
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "svcp-e2eimages-")
		if built.err != nil {
			return
		}
		wd, _ := os.Getwd()
		if built.err = os.Chdir(filepath.Join(wd, "..")); built.err != nil {
			return
		}
		bins, err := image.BuildBinaries(built.dir, "images/pause")
		os.Chdir(wd)
		if err != nil {
			built.err = err
			return
		}
		cfg := images.Config{Pause: bins["pause"]}
		if b, err := k8sbin.Build(context.Background(), k8sbin.Config{Conformance: true, CachedOnly: true}); err == nil {
			cfg.Agnhost = b.Agnhost
		} else {
			built.skip = err.Error()
		}
		built.files, built.specs = map[string]string{}, map[string]images.Spec{}
		var specs []images.Spec
		for _, s := range images.All() {
			if s.Needs != "agnhost" || cfg.Agnhost != "" {
				specs = append(specs, s)
				built.specs[s.File] = s
			}
		}
		files, err := images.Write(filepath.Join(built.dir, "out"), cfg, specs)
		for _, f := range files {
			built.files[path.Base(f)] = f
		}
		built.err = err
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.files, built.specs
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// forEach runs fn for every image, in a subtest named by its archive; the
// agnhost images skip, with advice, when agnhost is not built.
func forEach(t *testing.T, fn func(t *testing.T, spec images.Spec, archive string)) {
	files, specs := archives(t)
	for _, s := range images.All() {
		t.Run(s.File, func(t *testing.T) {
			archive, ok := files[s.File]
			if !ok {
				t.Skipf("needs agnhost: %s; run `make conformance-bins`", built.skip)
			}
			fn(t, specs[s.File], archive)
		})
	}
}

// TestArchives reads each archive as containerd's import does (index.json
// and its io.containerd.image.name) and as `docker load` does
// (manifest.json), validates the image, and checks that its entrypoint and
// the commands the tests run are executable files in it.
func TestArchives(t *testing.T) {
	forEach(t, func(t *testing.T, spec images.Spec, archive string) {
		if got := containerdName(t, archive); got != spec.Ref {
			t.Errorf("index.json names the image %q, want %q", got, spec.Ref)
		}
		tag, err := name.NewTag(spec.Ref)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(archive, &tag)
		if err != nil {
			t.Fatalf("read as a docker archive: %v", err)
		}
		if err := validate.Image(img); err != nil {
			t.Fatalf("validate.Image: %v", err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		argv := append(append([]string{}, cf.Config.Entrypoint...), cf.Config.Cmd...)
		if len(argv) == 0 {
			t.Fatal("no entrypoint and no cmd")
		}
		files := layerFiles(t, img)
		for _, c := range append([]string{argv[0]}, commands[spec.File]...) {
			if p, ok := lookPath(files, c); !ok {
				t.Errorf("%s: not an executable file in the image (resolved to %q)", c, p)
			}
		}
		if fi, err := os.Stat(archive); err == nil {
			t.Logf("%s: %s, archive %.1f MB", spec.Ref, strings.Join(argv, " "), float64(fi.Size())/1e6)
		}
	})
}

// TestRun unpacks each image and runs its tools in its root (chroot), in a
// throwaway network namespace with an /etc/hosts as the kubelet writes one:
// each finds its libraries and starts.
func TestRun(t *testing.T) {
	netnstest.RequireRoot(t, "chroot")
	forEach(t, func(t *testing.T, spec images.Spec, archive string) {
		tag, _ := name.NewTag(spec.Ref)
		img, err := tarball.ImageFromPath(archive, &tag)
		if err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		if err := image.Unpack(img, root); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "etc", "hosts"), []byte("127.0.0.1 localhost\n"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		ns := netnstest.New(t)
		for _, argv := range versionArgv[spec.File] {
			cmd := ns.Command(t.Context(), "chroot", append([]string{root}, argv...)...)
			cmd.Env = []string{image.DefaultPath}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("chroot %s: %v\n%s", strings.Join(argv, " "), err, out)
			}
		}
	})
}

// TestRefsMatchKubernetes checks the images' names against the e2e tests'
// own list, test/utils/image/manifest.go of the k8s.io/kubernetes version
// test/kapi/conformance pins, when the module cache holds it.
func TestRefsMatchKubernetes(t *testing.T) {
	gomod, err := os.ReadFile(filepath.Join("..", "test", "kapi", "conformance", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes (v\S+)\s*$`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("test/kapi/conformance/go.mod: no require k8s.io/kubernetes")
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	manifest := filepath.Join(strings.TrimSpace(string(modcache)), "k8s.io", "kubernetes@"+string(m[1]), "test", "utils", "image", "manifest.go")
	src, err := os.ReadFile(manifest)
	if err != nil {
		t.Skipf("needs k8s.io/kubernetes in the module cache (make conformance-bins fetches it): %v", err)
	}
	registries := map[string]string{}
	for _, r := range regexp.MustCompile(`(?m)^\s*(\w+Registry):\s*"([^"]+)"`).FindAllSubmatch(src, -1) {
		registries[string(r[1])] = string(r[2])
	}
	refs := map[string]string{}
	for _, c := range regexp.MustCompile(`configs\[(\w+)\] = Config\{list\.(\w+), "([^"]+)", "([^"]+)"\}`).FindAllSubmatch(src, -1) {
		refs[string(c[1])] = registries[string(c[2])] + "/" + string(c[3]) + ":" + string(c[4])
	}
	for id, want := range map[string]string{
		"Agnhost": images.AgnhostRef, "BusyBox": images.BusyBoxRef, "GlibcDnsTesting": images.GlibcDNSTestingRef,
		"Nginx": images.NginxRef, "Pause": images.PauseRef,
	} {
		if refs[id] != want {
			t.Errorf("manifest.go's %s is %q, images has %q", id, refs[id], want)
		}
	}
}

// containerdName reads index.json out of the archive and returns the name
// containerd's import gives its one image.
func containerdName(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("index.json: %v", err)
		}
		if h.Name != "index.json" {
			continue
		}
		var idx v1.IndexManifest
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			t.Fatal(err)
		}
		if len(idx.Manifests) != 1 {
			t.Fatalf("index.json has %d manifests, want 1", len(idx.Manifests))
		}
		return idx.Manifests[0].Annotations["io.containerd.image.name"]
	}
}

// layerFiles lists the flattened image: path -> its tar header.
func layerFiles(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[path.Clean("/"+h.Name)] = h
	}
}

// lookPath finds a command as a shell with the images' PATH would, through
// symlinks, and reports whether it ends at an executable regular file.
func lookPath(files map[string]*tar.Header, cmd string) (string, bool) {
	cands := []string{cmd}
	if !strings.HasPrefix(cmd, "/") {
		cands = nil
		for _, d := range strings.Split(strings.TrimPrefix(image.DefaultPath, "PATH="), ":") {
			cands = append(cands, path.Join(d, cmd))
		}
	}
	for _, p := range cands {
		for range 8 { // symlink hops
			h, ok := files[p]
			if !ok {
				break
			}
			if h.Typeflag == tar.TypeSymlink {
				if path.IsAbs(h.Linkname) {
					p = path.Clean(h.Linkname)
				} else {
					p = path.Join(path.Dir(p), h.Linkname)
				}
				continue
			}
			return p, h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0
		}
	}
	return "", false
}
