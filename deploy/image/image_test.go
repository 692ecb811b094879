package image_test

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"sigs.k8s.io/yaml"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/internal/netnstest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

var built struct {
	once    sync.Once
	dir     string
	archive string
	err     error
}

// archive builds the real image (svcproxy and clusterdns from ./cmd) once per
// test binary, as `make image` does, and returns the archive's path.
func archive(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skip("needs ldd, to find the tools' libraries")
	}
	for _, tool := range image.DefaultTools() {
		if _, err := os.Stat(tool.Name); err != nil {
			t.Skipf("needs %s, from the Debian packages the image copies (make deps)", tool.Name)
		}
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "svcp-image-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		// The module's root: `go build ./cmd/...` runs there.
		wd, _ := os.Getwd()
		if err := os.Chdir(filepath.Join(wd, "..", "..")); err != nil {
			built.err = err
			return
		}
		defer os.Chdir(wd)
		bins, err := image.BuildBinaries(dir, "svcproxy", "clusterdns")
		if err != nil {
			built.err = err
			return
		}
		img, err := image.Build(image.Config{Binaries: bins})
		if err != nil {
			built.err = err
			return
		}
		built.archive = filepath.Join(dir, "svcproxy-image.tar")
		// As mkimage writes it: the image under two names, each its entrypoint.
		dns, err := image.ClusterDNS(img)
		if err != nil {
			built.err = err
			return
		}
		built.err = image.WriteImages(built.archive, image.Named{Ref: image.DefaultRef, Image: img},
			image.Named{Ref: image.ClusterDNSRef, Image: dns})
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.archive
}

// TestArchiveDocker reads the archive as `docker load` does, by manifest.json
// and its RepoTags, and validates the image: every digest and diff ID checks out.
func TestArchiveDocker(t *testing.T) {
	path := archive(t)
	tag, err := name.NewTag(image.DefaultRef)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("read %s as a docker archive: %v", path, err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate.Image (docker archive): %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || len(cf.Config.Entrypoint) != 1 {
		t.Errorf("config: os %q arch %q entrypoint %q, want linux amd64 [/usr/local/bin/svcproxy]", cf.OS, cf.Architecture, cf.Config.Entrypoint)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: archive %.1f MB", image.DefaultRef, float64(fi.Size())/1e6)
}

// TestArchiveOCI reads the same archive as an OCI image layout, as
// containerd's import (kind load image-archive) does, finds the image by its
// annotations and validates it.
func TestArchiveOCI(t *testing.T) {
	path := archive(t)
	dir := t.TempDir()
	untar(t, path, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("read the archive as an OCI layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("index.json has %d manifests, want 2 (svcproxy's and clusterdns's)", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if got := desc.Annotations["io.containerd.image.name"]; got != "svcproxy.test/svcproxy:dev" {
		t.Errorf("index.json: io.containerd.image.name = %q, want %q", got, "svcproxy.test/svcproxy:dev")
	}
	if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != "dev" {
		t.Errorf("index.json: org.opencontainers.image.ref.name = %q, want %q", got, "dev")
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate.Image (OCI layout): %v", err)
	}
}

// TestRootFS unpacks the image and runs its tools in it (chroot), in a
// throwaway network namespace: each finds its libraries, and iptables its
// extensions (a rule with -p tcp --dport and a comment is written and read back).
func TestRootFS(t *testing.T) {
	netnstest.RequireRoot(t, "chroot")
	path := archive(t)
	tag, _ := name.NewTag(image.DefaultRef)
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := image.Unpack(img, root); err != nil {
		t.Fatal(err)
	}
	ns := netnstest.New(t)
	for _, argv := range [][]string{
		{"/usr/local/bin/svcproxy", "--help"},
		{"/usr/local/bin/kube-proxy", "--help"}, // kubeadm's DaemonSet's command
		{"/usr/local/bin/clusterdns", "--help"},
		{"/coredns", "--help"}, // CoreDNS's image's entrypoint
		{"iptables", "-t", "nat", "-N", "SVCP-TEST"},
		{"iptables", "-t", "nat", "-A", "SVCP-TEST", "-p", "tcp", "--dport", "80", "-m", "comment", "--comment", "image test", "-j", "REDIRECT", "--to-ports", "8080"},
		{"iptables-legacy", "-t", "filter", "-L"},
		{"ip6tables-restore", "--help"},
		{"nft", "list", "ruleset"},
		{"ipset", "version"},
		{"conntrack", "--version"},
		{"modprobe", "--version"},
	} {
		out, err := ns.Command(t.Context(), "chroot", append([]string{root}, argv...)...).CombinedOutput()
		// --help exits 0 for the Go programs (flag.ErrHelp) and 0 or 2 elsewhere.
		var ee interface{ ExitCode() int }
		if err != nil && !(errors.As(err, &ee) && strings.HasSuffix(argv[len(argv)-1], "help")) {
			t.Errorf("chroot %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	out := ns.Run(t, "chroot", root, "iptables-save", "-t", "nat")
	if !strings.Contains(out, `-A SVCP-TEST -p tcp -m tcp --dport 80 -m comment --comment "image test" -j REDIRECT --to-ports 8080`) {
		t.Errorf("iptables-save in the image does not show the rule it wrote:\n%s", out)
	}
}

// TestClusterDNSImage: the archive's second name is the same root
// filesystem (the one layer, stored once) with clusterdns as its
// entrypoint, as docker load reads it.
func TestClusterDNSImage(t *testing.T) {
	path := archive(t)
	layerOf := func(ref string) (v1.Hash, []string) {
		tag, _ := name.NewTag(ref)
		img, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if err := validate.Image(img); err != nil {
			t.Fatalf("validate.Image %s: %v", ref, err)
		}
		ls, err := img.Layers()
		if err != nil || len(ls) != 1 {
			t.Fatalf("%s: %d layers, %v", ref, len(ls), err)
		}
		d, _ := ls[0].Digest()
		cf, _ := img.ConfigFile()
		return d, cf.Config.Entrypoint
	}
	svc, svcEntry := layerOf(image.DefaultRef)
	dns, dnsEntry := layerOf(image.ClusterDNSRef)
	if svc != dns {
		t.Errorf("layers differ: %s and %s", svc, dns)
	}
	if strings.Join(svcEntry, " ") != "/usr/local/bin/svcproxy" || strings.Join(dnsEntry, " ") != "/coredns" {
		t.Errorf("entrypoints %q and %q", svcEntry, dnsEntry)
	}
}

// TestCoreDNSDeploymentRuns runs clusterdns's image as a container runtime
// runs kubeadm's coredns Deployment (deploy/coredns): the image's
// entrypoint with the container's arguments, the coredns ConfigMap's
// Corefile mounted at /etc/coredns/Corefile, in a network namespace of its
// own (chroot into the unpacked image). With no API server here, one
// argument is added, --services, the only difference from a pod. It must
// answer DNS and its probes on kubeadm's ports.
func TestCoreDNSDeploymentRuns(t *testing.T) {
	netnstest.RequireRoot(t, "chroot", "dig", "curl")
	path := archive(t)
	tag, _ := name.NewTag(image.ClusterDNSRef)
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := image.Unpack(img, root); err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	dep, corefile := kubeadmCoreDNS(t)
	files := map[string]string{
		"/etc/coredns/Corefile": corefile,
		"/etc/resolv.conf":      "nameserver 127.0.0.1\n", // a loop: /ready says so, names in the zone answer
		"/services.yaml": `apiVersion: v1
kind: Service
metadata: {name: kubernetes, namespace: default}
spec:
  clusterIP: 198.18.0.1
  ports: [{name: https, port: 443, protocol: TCP}]
`,
	}
	for p, data := range files {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ns := netnstest.New(t)
	argv := append(append([]string{root}, cf.Config.Entrypoint...), dep...)
	argv = append(argv, "--services", "/services.yaml")
	ns.Start(t, "chroot", argv...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := ns.Command(t.Context(), "dig", "@127.0.0.1", "+short", "kubernetes.default.svc.cluster.local").CombinedOutput()
		if strings.TrimSpace(string(out)) == "198.18.0.1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chroot %s: no answer within 20s: %q", strings.Join(argv[1:], " "), out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := ns.Run(t, "curl", "-s", "http://127.0.0.1:8080/health"); out != "OK" {
		t.Errorf("/health (the liveness probe's port): %q", out)
	}
	if out := ns.Run(t, "curl", "-s", "http://127.0.0.1:9153/metrics"); !strings.Contains(out, "coredns_dns_requests_total") {
		t.Errorf("/metrics on 9153 has no coredns_dns_requests_total")
	}
}

// kubeadmCoreDNS reads deploy/coredns: the Deployment's container arguments
// and the ConfigMap's Corefile.
func kubeadmCoreDNS(t *testing.T) (args []string, corefile string) {
	t.Helper()
	b, err := os.ReadFile("../coredns/coredns.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var o struct {
			Kind string
			Data map[string]string
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Command, Args []string
						}
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		switch o.Kind {
		case "Deployment":
			c := o.Spec.Template.Spec.Containers[0]
			if len(c.Command) > 0 {
				t.Fatalf("the Deployment sets a command (%q): kubeadm's gives arguments only", c.Command)
			}
			args = c.Args
		case "ConfigMap":
			corefile = o.Data["Corefile"]
		}
	}
	if len(args) == 0 || corefile == "" {
		t.Fatal("deploy/coredns: no Deployment arguments or no Corefile")
	}
	return args, corefile
}

func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSetFileCaps checks the file capability that `setcap
// cap_net_bind_service=+ep` writes: in the layer as a PAX record, and, as
// root, on the file Unpack writes.
func TestSetFileCaps(t *testing.T) {
	var root image.Root
	root.AddFile("/coredns", 0o755, []byte("#!/bin/true\n"))
	if err := root.SetFileCaps("/coredns", unix.CAP_NET_BIND_SERVICE); err != nil {
		t.Fatal(err)
	}
	if err := root.SetFileCaps("/missing", unix.CAP_NET_BIND_SERVICE); err == nil {
		t.Error("SetFileCaps of a file not in the image: want an error")
	}
	img, err := root.Image(v1.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// struct vfs_cap_data: VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE,
	// then permitted bit 10 (CAP_NET_BIND_SERVICE), nothing inheritable.
	want := "\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "coredns" {
			found = true
			if got := h.PAXRecords["SCHILY.xattr.security.capability"]; got != want {
				t.Errorf("security.capability = %q, want %q", got, want)
			}
		}
	}
	if !found {
		t.Fatal("coredns not in the layer")
	}
	if os.Geteuid() != 0 {
		t.Skip("Unpack's xattr needs root (CAP_SETFCAP)")
	}
	dir := t.TempDir()
	if err := image.Unpack(img, dir); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(filepath.Join(dir, "coredns"), "security.capability", buf)
	if err != nil || string(buf[:n]) != want {
		t.Errorf("unpacked file's security.capability = %q, %v; want %q", buf[:n], err, want)
	}
}
