// Package kindnode builds a node image for kind v0.33.0 without a registry:
// what kind's images/base Dockerfile makes, from Debian's packages, with
// kubeadm, kubelet and kubectl built here and the images kind's nodes run
// already in their containerd's store, written as an archive that `docker
// load` takes (docs/kind.md, "The node image").
//
// Build does, in order:
//
//  1. debootstrap a Debian bookworm root (minbase, with systemd, containerd,
//     runc, the CNI plugins and the tools kind's scripts run: Packages),
//     cached under CacheDir and copied for each build;
//  2. kind's images/base/files from the sigs.k8s.io/kind module copied in,
//     and the steps of its Dockerfile done in a chroot (systemd's wants
//     removed, kubelet, containerd and undo-mount-hacks enabled,
//     systemd-binfmt masked), containerd's base OCI spec written with kind's
//     createContainer hook, Debian's containerd, ctr, shim and CNI plugins
//     where kind's units and config look for them, runc-capbound beside them;
//  3. kind's containerd configuration with the sandbox image kubeadm v1.37.2
//     names (kind's node build does the same rewrite);
//  4. kubelet, kubeadm and kubectl in /usr/bin, /kind/version;
//  5. the image archives imported into the root's containerd store by a
//     containerd of the build machine (Debian's, the same version), without
//     unpacking, as kind's node build imports them (`ctr images import
//     --no-unpack`): the node's containerd unpacks each on first use;
//  6. /kind/manifests: kind's CNI manifest naming kindnet's image
//     (images/kindnet), and a storage class;
//  7. the root as one layer (GNU tar, numeric owners and extended
//     attributes), with kind's entrypoint, environment and stop signal.
package kindnode

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/svcproxy/svcproxy/deploy/image"
)

// Ref is the node image's name: kind's nodes are `kind create cluster
// --image Ref`. The .test domain is reserved: nothing pulls it.
const Ref = "svcproxy.test/kind-node:v1.37.2"

// KubernetesVersion is the version of kubeadm, kubelet and kubectl in the
// image, written to /kind/version (kind reads it).
const KubernetesVersion = "v1.37.2"

// Suite is the Debian release of the root.
const Suite = "bookworm"

// Packages are what debootstrap adds to minbase: kind's base image's
// packages where Debian has them (systemd as PID 1, containerd, runc, the
// CNI plugins, iptables and nftables, the tools kubeadm's preflight and
// kind's scripts run: jq for kind's mount-product-files.sh hook, which
// runs in every container's createContainer hook).
var Packages = []string{
	"systemd", "systemd-sysv", "dbus", "libsystemd0",
	"containerd", "runc", "containernetworking-plugins",
	"conntrack", "iptables", "nftables", "iproute2", "ethtool", "socat", "kmod",
	"mount", "e2fsprogs", "procps", "bash", "ca-certificates", "curl", "jq",
	"libseccomp2", "pigz",
}

// Config is what Build needs. Every file is of the build machine.
type Config struct {
	// KindModule is the directory of the sigs.k8s.io/kind v0.33.0 module
	// (`go mod download -json`), for images/base/files and its CNI
	// manifest's template.
	KindModule string
	// Kubelet, Kubeadm, Kubectl are v1.37.2 (internal/k8sbin).
	Kubelet, Kubeadm, Kubectl string
	// RuncCapbound is cmd/runc-capbound, static: containerd's runtime on
	// machines whose bounding set lacks CAP_SYS_RESOURCE (the host patch
	// names it).
	RuncCapbound string
	// Archives are image archives (OCI layout or docker save) imported
	// into the node's containerd: kubeadm's images and kindnet's.
	Archives []string
	// KindnetRef is kindnet's image, which the CNI manifest names.
	KindnetRef string
	// CacheDir keeps the debootstrapped root between builds.
	CacheDir string
	// Mirror is debootstrap's mirror; "" is debootstrap's default.
	Mirror string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Build makes the node image in a work directory under the cache and
// returns it; the layer stays in that directory until the image is written
// (cleanup removes it).
func Build(ctx context.Context, cfg Config) (img v1.Image, cleanup func(), err error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	for _, f := range []string{cfg.Kubelet, cfg.Kubeadm, cfg.Kubectl, cfg.RuncCapbound, filepath.Join(cfg.KindModule, "images/base/files")} {
		if _, err := os.Stat(f); err != nil {
			return nil, nil, fmt.Errorf("kind node image: %w", err)
		}
	}
	if cfg.KindnetRef == "" {
		return nil, nil, errors.New("kind node image: Config.KindnetRef is empty")
	}
	base, err := debootstrap(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	work, err := os.MkdirTemp(cfg.CacheDir, "build-")
	if err != nil {
		return nil, nil, err
	}
	cleanup = func() { os.RemoveAll(work) }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	root := filepath.Join(work, "root")
	step := stepper(cfg.Log)
	if err := step("copy the Debian root", func() error {
		return run(ctx, "cp", "-a", "--reflink=auto", base, root)
	}); err != nil {
		return nil, nil, err
	}
	if err := step("kind's base files and Dockerfile steps", func() error { return kindBase(ctx, cfg, root) }); err != nil {
		return nil, nil, err
	}
	if err := step("kubelet, kubeadm, kubectl", func() error { return kubernetes(cfg, root) }); err != nil {
		return nil, nil, err
	}
	if err := step(fmt.Sprintf("import %d image archives into the node's containerd", len(cfg.Archives)), func() error {
		return preload(ctx, work, root, cfg.Archives)
	}); err != nil {
		return nil, nil, err
	}
	if err := step("kind's manifests", func() error { return manifests(cfg, root) }); err != nil {
		return nil, nil, err
	}
	layerTar := filepath.Join(work, "layer.tar")
	if err := step("the root as one layer", func() error {
		return run(ctx, "tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls",
			"-C", root, "-cf", layerTar, ".")
	}); err != nil {
		return nil, nil, err
	}
	if err := os.RemoveAll(root); err != nil {
		return nil, nil, err
	}
	layer, err := tarball.LayerFromFile(layerTar, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, nil, err
	}
	img, err = mutate.Append(empty.Image, mutate.Addendum{Layer: layer, History: v1.History{
		CreatedBy: "svcproxy images/kindnode: debootstrap " + Suite + ", kind v0.33.0 images/base, Kubernetes " + KubernetesVersion,
	}})
	if err != nil {
		return nil, nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	// kind's base image: ENV container=docker, STOPSIGNAL SIGRTMIN+3,
	// ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"].
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "container=docker"}
	cf.Config.StopSignal = "SIGRTMIN+3"
	cf.Config.Entrypoint = []string{"/usr/local/bin/entrypoint", "/sbin/init"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "kind node " + KubernetesVersion,
		"org.opencontainers.image.description": "a kind v0.33.0 node image built without a registry by svcproxy's images/kindnode (docs/kind.md)",
	}
	img, err = mutate.ConfigFile(img, cf)
	return img, cleanup, err
}

// Write builds the image and writes it to path as an archive both `docker
// load` and containerd take (deploy/image.WriteArchive).
func Write(ctx context.Context, cfg Config, path string) error {
	img, cleanup, err := Build(ctx, cfg)
	if err != nil {
		return err
	}
	defer cleanup()
	return stepper(cfg.Log)("write "+path, func() error { return image.WriteArchive(path, img, Ref) })
}

// stepper runs named steps and logs each with its time.
func stepper(log io.Writer) func(string, func() error) error {
	return func(name string, fn func() error) error {
		start := time.Now()
		fmt.Fprintf(log, "kindnode: %s\n", name)
		if err := fn(); err != nil {
			return fmt.Errorf("kind node image: %s: %w", name, err)
		}
		fmt.Fprintf(log, "kindnode: %s: %s\n", name, time.Since(start).Round(100*time.Millisecond))
		return nil
	}
}

// debootstrap returns the cached Debian root for Suite and Packages,
// making it first if the cache lacks it.
func debootstrap(ctx context.Context, cfg Config) (string, error) {
	h := sha256.Sum256([]byte(Suite + " " + strings.Join(Packages, ",") + " " + cfg.Mirror))
	dir := filepath.Join(cfg.CacheDir, "debootstrap-"+Suite+"-"+hex.EncodeToString(h[:])[:12])
	if _, err := os.Stat(filepath.Join(dir, "etc/os-release")); err == nil {
		fmt.Fprintf(cfg.Log, "kindnode: Debian root cached in %s\n", dir)
		return dir, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", fmt.Errorf("kind node image: debootstrap: %w (Debian's debootstrap; `make deps` installs it)", err)
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return "", err
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	argv := []string{"debootstrap", "--variant=minbase", "--include=" + strings.Join(Packages, ","), Suite, tmp}
	if cfg.Mirror != "" {
		argv = append(argv, cfg.Mirror)
	}
	err := stepper(cfg.Log)("debootstrap "+Suite+" (a minute or two)", func() error { return run(ctx, argv...) })
	if err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	// apt's downloaded packages are not part of a node.
	os.RemoveAll(filepath.Join(tmp, "var/cache/apt/archives"))
	os.MkdirAll(filepath.Join(tmp, "var/cache/apt/archives/partial"), 0o755)
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// kindBase copies kind's images/base/files and does its Dockerfile's steps.
func kindBase(ctx context.Context, cfg Config, root string) error {
	files := filepath.Join(cfg.KindModule, "images/base/files")
	// The module cache is read-only; modes are set as the Dockerfile's
	// COPY --chmod sets them: 0755 for /usr/local/bin and /kind/bin,
	// 0644 for the rest.
	if err := run(ctx, "cp", "-r", "--no-preserve=mode,ownership", files+"/.", root); err != nil {
		return err
	}
	err := filepath.WalkDir(files, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(files, p)
		mode := os.FileMode(0o644)
		if d.IsDir() || strings.HasPrefix(rel, "usr/local/bin/") || strings.HasPrefix(rel, "kind/bin/") {
			mode = 0o755
		}
		return os.Chmod(filepath.Join(root, rel), mode)
	})
	if err != nil {
		return err
	}
	// RUN rm -f .../*.wants/*, ReadKMsg=no, systemctl enable/mask.
	script := `set -e
rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
  /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
  /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >> /etc/systemd/journald.conf
ln -sf /usr/lib/systemd/systemd /sbin/init
systemctl enable kubelet.service containerd.service undo-mount-hacks.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests /opt/cni /usr/local/sbin
`
	if err := run(ctx, "chroot", root, "/bin/sh", "-c", script); err != nil {
		return err
	}
	// Where kind's units and configuration look: containerd and its
	// shim in /usr/local/bin, the CNI plugins in /opt/cni/bin, runc on PATH.
	links := map[string]string{
		"usr/local/bin/containerd":              "/usr/bin/containerd",
		"usr/local/bin/ctr":                     "/usr/bin/ctr",
		"usr/local/bin/containerd-shim-runc-v2": "/usr/bin/containerd-shim-runc-v2",
		"opt/cni/bin":                           "/usr/lib/cni",
	}
	for p, target := range links {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			return err
		}
	}
	if err := copyFile(cfg.RuncCapbound, filepath.Join(root, "usr/local/bin/runc-capbound"), 0o755); err != nil {
		return err
	}
	// RUN ctr oci spec | jq (kind's hook added) | jq 'del(.process.rlimits)'.
	out, err := exec.CommandContext(ctx, "chroot", root, "ctr", "oci", "spec").Output()
	if err != nil {
		return fmt.Errorf("ctr oci spec: %w", err)
	}
	spec, err := criBaseSpec(out)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc/containerd/cri-base.json"), spec, 0o644); err != nil {
		return err
	}
	// kind's node build rewrites the sandbox image to the pause image of
	// the Kubernetes version it packs (kubeadm v1.37.2: pause:3.10.2);
	// containerd would otherwise try to pull kind's pause:3.10.
	conf := filepath.Join(root, "etc/containerd/config.toml")
	b, err := os.ReadFile(conf)
	if err != nil {
		return err
	}
	const old = `sandbox_image = "registry.k8s.io/pause:3.10"`
	if !bytes.Contains(b, []byte(old)) {
		return fmt.Errorf("%s: no %s to rewrite (kind's file changed?)", conf, old)
	}
	b = bytes.Replace(b, []byte(old), []byte(`sandbox_image = "registry.k8s.io/pause:3.10.2"`), 1)
	return os.WriteFile(conf, b, 0o644)
}

// criBaseSpec is kind's /etc/containerd/cri-base.json from `ctr oci spec`:
// kind's mount-product-files.sh appended to the createContainer hooks, the
// rlimits removed.
func criBaseSpec(spec []byte) ([]byte, error) {
	var s map[string]any
	if err := json.Unmarshal(spec, &s); err != nil {
		return nil, fmt.Errorf("ctr oci spec: %w", err)
	}
	hooks, _ := s["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	create, _ := hooks["createContainer"].([]any)
	hooks["createContainer"] = append(create, map[string]any{"path": "/kind/bin/mount-product-files.sh"})
	s["hooks"] = hooks
	if p, ok := s["process"].(map[string]any); ok {
		delete(p, "rlimits")
	}
	return json.MarshalIndent(s, "", "    ")
}

// kubernetes installs the three programs and /kind/version.
func kubernetes(cfg Config, root string) error {
	for _, p := range []struct{ src, name string }{{cfg.Kubelet, "kubelet"}, {cfg.Kubeadm, "kubeadm"}, {cfg.Kubectl, "kubectl"}} {
		if err := copyFile(p.src, filepath.Join(root, "usr/bin", p.name), 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(root, "kind/version"), []byte(KubernetesVersion+"\n"), 0o644)
}

// preload imports archives into root's containerd store (namespace
// k8s.io, the CRI's), with a containerd of the build machine whose root is
// the node's /var/lib/containerd. --no-unpack: the store holds the images'
// blobs and metadata, as kindest/node's does; the node's containerd unpacks
// an image into its snapshotter when a container first needs it.
func preload(ctx context.Context, work, root string, archives []string) error {
	if len(archives) == 0 {
		return nil
	}
	state := filepath.Join(work, "c")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	sock := filepath.Join(state, "sock")
	// Only what an import needs: no CRI, no snapshotters beyond the
	// default's (the import does not unpack).
	config := `version = 2
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp"]
`
	if err := os.WriteFile(filepath.Join(state, "config.toml"), []byte(config), 0o644); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(work, "containerd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("containerd", "--config", filepath.Join(state, "config.toml"),
		"--root", filepath.Join(root, "var/lib/containerd"), "--state", filepath.Join(state, "state"), "--address", sock)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("containerd: %w (Debian's containerd; `make deps` installs it)", err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := exec.CommandContext(ctx, "ctr", "--address", sock, "version").Run(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("containerd did not answer on %s within 30s; its log:\n%s", sock, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, a := range archives {
		if err := run(ctx, "ctr", "--address", sock, "-n", "k8s.io", "images", "import",
			"--all-platforms", "--no-unpack", "--digests", a); err != nil {
			return err
		}
	}
	return nil
}

// manifests writes /kind/manifests/default-cni.yaml, kind's kindnetd
// manifest (a template kind fills in with the pod subnet and patches with
// the control plane's address) naming kindnet's image, and
// default-storage.yaml.
func manifests(cfg Config, root string) error {
	dir := filepath.Join(root, "kind/manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cni, err := CNIManifest(cfg.KindModule, cfg.KindnetRef)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "default-cni.yaml"), []byte(cni), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "default-storage.yaml"), []byte(storageManifest), 0o644)
}

// storageManifest is kind's default StorageClass "standard" without its
// provisioner: local-path-provisioner's images are not built here, so a
// PersistentVolumeClaim of this class stays Pending (docs/kind.md).
const storageManifest = `# kind's default StorageClass, without local-path-provisioner (not built
# by svcproxy): claims of this class need a PersistentVolume made by hand.
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
`

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

func run(ctx context.Context, argv ...string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		if len(out) > 4000 {
			out = out[len(out)-4000:]
		}
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// CNIManifest is kind v0.33.0's default CNI manifest (defaultCNIManifest
// in its pkg/build/nodeimage/const_cni.go, read from the module) with
// kindnetd's image replaced by ref.
func CNIManifest(kindModule, ref string) (string, error) {
	file := filepath.Join(kindModule, "pkg/build/nodeimage/const_cni.go")
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	const start = "const defaultCNIManifest = `"
	_, rest, ok := strings.Cut(string(b), start)
	if !ok {
		return "", fmt.Errorf("%s: no %q", file, start)
	}
	const image = "` + kindnetdImage + `"
	before, after, ok := strings.Cut(rest, image)
	if !ok {
		return "", fmt.Errorf("%s: the manifest does not name %q", file, image)
	}
	after, _, ok = strings.Cut(after, "`")
	if !ok {
		return "", fmt.Errorf("%s: the manifest does not end", file)
	}
	return before + ref + after, nil
}

// DefaultCacheDir is where Build keeps the debootstrapped root and
// mkkindnode a copy of the last archive: the user cache's
// svcproxy/kind-node.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "svcproxy", "kind-node"), nil
}

// CachedArchive is the copy of the last archive written in cacheDir,
// which the kind smoke test loads.
func CachedArchive(cacheDir string) string { return filepath.Join(cacheDir, "kind-node.tar") }
