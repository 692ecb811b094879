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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
	// kubeadm's: what its manifests run, by name through PATH.
	"kube-apiserver.tar":          {"kube-apiserver"},
	"kube-controller-manager.tar": {"kube-controller-manager"},
	"kube-scheduler.tar":          {"kube-scheduler"},
	"etcd.tar":                    {"etcd", "etcdctl"},
	"kube-proxy.tar": {"/usr/local/bin/kube-proxy", "iptables", "iptables-save", "iptables-restore",
		"ip6tables", "ip6tables-save", "ip6tables-restore", "iptables-legacy", "iptables-legacy-restore",
		"iptables-nft", "nft", "ipset", "conntrack", "modprobe"},
	"coredns.tar": {"/coredns"},
}

// versionArgv run in each image's root (chroot): each tool finds its
// libraries and starts.
var versionArgv = map[string][][]string{
	"pause.tar": {{"/pause", "-v"}},
	"busybox.tar": {{"sh", "-c", "seq 1 3 | wc -l"},
		// -T, which Debian's busybox wget would crash on (wgetTimeout):
		// nothing listens in the test's namespace, so it fails, with 1.
		{"sh", "-c", "wget -q -T 2 -O- http://127.0.0.1:1/; test $? -eq 1"},
		{"sh", "-c", "wget -q -T2 -O- http://127.0.0.1:1/; test $? -eq 1"}},
	"glibc-dns-testing.tar": {{"dig", "-v"}, {"host", "-V"}, {"sh", "-c", "getent hosts localhost && seq 1 2"}},
	"agnhost.tar": {{"/agnhost", "--help"}, {"/agnhost-2", "--help"}, {"curl", "--version"},
		{"dig", "-v"}, {"ss", "-V"}, {"sh", "-c", "getent hosts localhost"},
		// In the tests' sh -c scripts, the Debian tools and not busybox's applets.
		{"sh", "-c", "ip -V | grep -q iproute2"}, {"sh", "-c", "wget --version | grep -q 'GNU Wget'"},
		{"sh", "-c", "nc -h 2>&1 | grep -q OpenBSD"}, {"sh", "-c", "nslookup -version 2>&1 | grep -q Debian"}},
	"nginx.tar": {{"/agnhost", "test-webserver", "--help"}},
	"kube-proxy.tar": {{"iptables", "-t", "nat", "-N", "KUBE-TEST"},
		{"iptables", "-t", "nat", "-A", "KUBE-TEST", "-p", "tcp", "--dport", "80", "-m", "comment", "--comment", "image test", "-j", "DNAT", "--to-destination", "198.19.0.2:8080"},
		{"ip6tables-save"},
		{"iptables-legacy-save"}, {"nft", "list", "ruleset"}, {"ipset", "version"}, {"conntrack", "--version"},
		{"modprobe", "--version"}},
}

// versions are the --version lines of kubeadm's images' programs: each
// runs in its image and says the version its name promises (after
// versionArgv, and split on spaces).
var versions = map[string][][2]string{
	"kube-apiserver.tar":          {{"kube-apiserver --version", "Kubernetes v1.37.2"}},
	"kube-controller-manager.tar": {{"kube-controller-manager --version", "Kubernetes v1.37.2"}},
	"kube-scheduler.tar":          {{"kube-scheduler --version", "Kubernetes v1.37.2"}},
	"kube-proxy.tar": {{"kube-proxy --version", "Kubernetes v1.37.2"},
		// The rule versionArgv wrote, read back: iptables found its extensions.
		{"iptables-save -t nat", `-A KUBE-TEST -p tcp -m tcp --dport 80 -m comment --comment "image test" -j DNAT --to-destination 198.19.0.2:8080`}},
	"etcd.tar":    {{"etcd --version", "etcd Version: 3.7.0"}, {"etcdctl version", "etcdctl version: 3.7.0"}},
	"coredns.tar": {{"/coredns -version", "CoreDNS-1.14.6"}},
}

var built struct {
	once  sync.Once
	dir   string
	files map[string]string // File -> archive
	specs map[string]images.Spec
	skip  map[string]string // File -> why it is not built
	err   error
}

// allSpecs are the e2e images and kubeadm's, pause once.
func allSpecs() []images.Spec {
	specs := images.All()
	for _, s := range images.Kubeadm() {
		if s.File != "pause.tar" {
			specs = append(specs, s)
		}
	}
	return specs
}

// programs fills cfg with the programs test/kapi's cache holds.
func programs(cfg *images.Config) {
	cached := func(c k8sbin.Config) k8sbin.Binaries {
		c.CachedOnly = true
		b, _ := k8sbin.Build(context.Background(), c)
		return b
	}
	cfg.Agnhost = cached(k8sbin.Config{Conformance: true}).Agnhost
	cfg.KubeAPIServer = cached(k8sbin.Config{}).APIServer
	cfg.KubeControllerManager = cached(k8sbin.Config{ControlPlane: true}).ControllerManager
	cfg.KubeScheduler = cached(k8sbin.Config{Node: true}).Scheduler
	cl := cached(k8sbin.Config{KubeProxy: true})
	cfg.KubeProxy = cl.KubeProxy
	cfg.CoreDNS = cached(k8sbin.Config{CoreDNS: true}).CoreDNS
	etcd := cached(k8sbin.Config{Cluster: true})
	cfg.Etcd, cfg.Etcdctl = etcd.ClusterEtcd, etcd.ClusterEtcdctl
}

// archives builds every image once per test binary, as `make e2e-images`
// and `make kubeadm-images` do; those whose programs test/kapi's cache does
// not hold are skipped.
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
		programs(&cfg)
		built.files, built.specs, built.skip = map[string]string{}, map[string]images.Spec{}, map[string]string{}
		var specs []images.Spec
		for _, s := range allSpecs() {
			if missing := cfg.Missing(s); len(missing) > 0 {
				built.skip[s.File] = strings.Join(missing, ", ")
				continue
			}
			specs = append(specs, s)
			built.specs[s.File] = s
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

// forEach runs fn for every image, in a subtest named by its archive; an
// image whose programs are not built skips, with advice.
func forEach(t *testing.T, fn func(t *testing.T, spec images.Spec, archive string)) {
	files, specs := archives(t)
	for _, s := range allSpecs() {
		t.Run(s.File, func(t *testing.T) {
			archive, ok := files[s.File]
			if !ok {
				target := "make cluster-bins"
				if slices.Contains(s.Needs, "agnhost") {
					target = "make conformance-bins"
				}
				t.Skipf("needs %s, not built: run `%s`", built.skip[s.File], target)
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
		for _, v := range versions[spec.File] {
			argv := strings.Fields(v[0])
			cmd := ns.Command(t.Context(), "chroot", append([]string{root}, argv...)...)
			cmd.Env = []string{image.DefaultPath}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), v[1]) {
				t.Errorf("chroot %s: %v\n%s\nwant %q", v[0], err, out, v[1])
			} else {
				t.Logf("%s: %s", v[0], strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0])
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

// TestKubeadmRefs asks the built kubeadm for the images it runs (`kubeadm
// config images list`) and checks that Kubeadm names each of them, when
// test/kapi's cache holds kubeadm.
func TestKubeadmRefs(t *testing.T) {
	bins, err := k8sbin.Build(context.Background(), k8sbin.Config{KubeProxy: true, CachedOnly: true})
	if err != nil {
		t.Skipf("needs kubeadm: %v; run `make cluster-bins`", err)
	}
	out, err := exec.Command(bins.Kubeadm, "config", "images", "list", "--kubernetes-version", "v1.37.2").CombinedOutput()
	if err != nil {
		t.Fatalf("kubeadm config images list: %v\n%s", err, out)
	}
	var want []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "registry.k8s.io/") {
			want = append(want, line)
		}
	}
	var got []string
	for _, s := range images.Kubeadm() {
		got = append(got, s.Ref)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("images.Kubeadm() names\n%s\nkubeadm config images list says\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCoreDNSAsNonRoot runs the coredns image as its user, nonroot
// (65532), in a throwaway network namespace: CoreDNS binds port 53 through
// the file capability the image gives /coredns (a process that is not root
// holds none otherwise), and answers.
func TestCoreDNSAsNonRoot(t *testing.T) {
	netnstest.RequireRoot(t, "chroot", "dig")
	files, _ := archives(t)
	archive, ok := files["coredns.tar"]
	if !ok {
		t.Skipf("needs CoreDNS, not built: run `make cluster-bins`")
	}
	tag, _ := name.NewTag(images.CoreDNSRef)
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (CoreDNS's nonroot)", cf.Config.User)
	}
	root := t.TempDir()
	if err := image.Unpack(img, root); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil { // TempDir is 0700: the user must reach /coredns
		t.Fatal(err)
	}
	corefile := ".:53 {\n    bind 127.0.0.1\n    whoami\n}\n"
	if err := os.WriteFile(filepath.Join(root, "Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := netnstest.New(t)
	ns.Start(t, "chroot", "--userspec=65532:65532", root, "/coredns", "-conf", "/Corefile")
	var out string
	for range 100 {
		// whoami answers in the additional section with the asker's address.
		b, err := ns.Command(t.Context(), "dig", "+time=1", "+tries=1", "@127.0.0.1", "-p", "53", "whoami.example").CombinedOutput()
		out = string(b)
		if err == nil && strings.Contains(out, "whoami.example.\t\t0\tIN\tA\t127.0.0.1") {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("CoreDNS as user 65532 did not answer on 127.0.0.1:53: %s", out)
}
