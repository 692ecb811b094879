package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DefaultRef is the image's name in deploy/base. Nothing is ever pulled by
// it: the .test domain is reserved (RFC 2606) and the manifests say
// imagePullPolicy: Never, so a node without the loaded image says
// ErrImageNeverPull instead of fetching someone else's.
const DefaultRef = "svcproxy.test/svcproxy:dev"

// binDir is where svcproxy and clusterdns live in the image.
const binDir = "/usr/local/bin"

// KubeProxyName is svcproxy's second name in the image,
// /usr/local/bin/kube-proxy, the command of kubeadm's kube-proxy DaemonSet.
const KubeProxyName = "kube-proxy"

// CoreDNSPath is clusterdns's second name in the image, /coredns: the
// program of CoreDNS's image (registry.k8s.io/coredns/coredns), its
// entrypoint, and the entrypoint of the image ClusterDNS makes.
const CoreDNSPath = "/coredns"

// epoch is every file's time and the image's creation time, so that the same
// inputs give the same image digest.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Config says what goes into the image.
type Config struct {
	// Binaries are the Go programs, name -> file on this machine, installed
	// as /usr/local/bin/NAME. They must be static (CGO_ENABLED=0).
	Binaries map[string]string
	// Tools are the commands from this machine's packages; nil is DefaultTools.
	Tools []Tool
	// Entrypoint is the image's default command; "" is /usr/local/bin/svcproxy.
	Entrypoint string
}

// Build gathers the root filesystem and returns the image: one gzip layer,
// OCI media types, linux/amd64.
func Build(cfg Config) (v1.Image, error) {
	if len(cfg.Binaries) == 0 {
		return nil, errors.New("image: no binaries")
	}
	if cfg.Tools == nil {
		cfg.Tools = DefaultTools()
	}
	if cfg.Entrypoint == "" {
		cfg.Entrypoint = path.Join(binDir, "svcproxy")
	}
	var root Root
	// /proc, /sys and /dev are where a container runtime mounts them.
	for _, d := range []string{"/etc", "/run", "/var/run", "/var/lib", "/lib/modules", "/proc", "/sys", "/dev", binDir} {
		root.AddDir(d, 0o755)
	}
	root.AddDir("/tmp", os.ModeSticky|0o777)
	// Two users, so that ps and ls name them: root, and the nonroot user the
	// clusterdns Deployment runs as (distroless's 65532).
	root.AddFile("/etc/passwd", 0o644, []byte(
		"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
	root.AddFile("/etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n"))
	names := make([]string, 0, len(cfg.Binaries))
	for name, src := range cfg.Binaries {
		if err := CheckStatic(src); err != nil {
			return nil, fmt.Errorf("image: binary %s: %w", name, err)
		}
		if err := root.CopyFile(src, path.Join(binDir, name), 0o755); err != nil {
			return nil, fmt.Errorf("image: binary %s: %w", name, err)
		}
		names = append(names, name)
	}
	// kubeadm's kube-proxy DaemonSet (and kind's, made by kubeadm) runs
	// /usr/local/bin/kube-proxy --config=... : with only its image changed,
	// that name starts svcproxy.
	if _, ok := cfg.Binaries["svcproxy"]; ok {
		root.AddSymlink(path.Join(binDir, KubeProxyName), "svcproxy")
		names = append(names, KubeProxyName+" (svcproxy)")
	}
	// CoreDNS's image runs /coredns (its entrypoint); a Deployment that
	// names it as its command starts clusterdns with only its image changed.
	if _, ok := cfg.Binaries["clusterdns"]; ok {
		root.AddSymlink(CoreDNSPath, strings.TrimPrefix(path.Join(binDir, "clusterdns"), "/"))
		names = append(names, CoreDNSPath+" (clusterdns)")
	}
	sort.Strings(names)
	if err := root.AddNetfilter(cfg.Tools); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return root.Image(v1.Config{
		Entrypoint: []string{cfg.Entrypoint},
		Env:        []string{DefaultPath},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "svcproxy",
			"org.opencontainers.image.description": "svcproxy and clusterdns: " + strings.Join(names, ", ") + " in " + binDir + ", with iptables, nft, ipset, conntrack and modprobe",
		},
	})
}

// ClusterDNSRef is the name of the image that starts clusterdns: the
// svcproxy image's root filesystem (the same layer) with clusterdns as its
// entrypoint, under CoreDNS's image's name for it, /coredns. kubeadm's
// coredns Deployment gives its container arguments only (-conf
// /etc/coredns/Corefile), which CoreDNS's image's entrypoint takes; with
// only its image changed to this one, clusterdns takes them, and a
// Deployment whose command is /coredns starts it too.
const ClusterDNSRef = "svcproxy.test/clusterdns:dev"

// ClusterDNS is img (Build's, with clusterdns in it) with clusterdns as its
// entrypoint. It runs as root, as the image's other programs: kubeadm's
// Deployment drops every capability but NET_BIND_SERVICE, which lets it
// bind port 53 (CoreDNS's image runs as 65532 with that capability on its
// binary's file instead).
func ClusterDNS(img v1.Image) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg := *cf.Config.DeepCopy()
	cfg.Entrypoint = []string{CoreDNSPath}
	cfg.Labels = map[string]string{
		"org.opencontainers.image.title":       "clusterdns",
		"org.opencontainers.image.description": "clusterdns, svcproxy's cluster DNS, answering to CoreDNS's command line (-conf FILE)",
	}
	return mutate.Config(img, cfg)
}

// DefaultPath is the PATH of the images built here, Debian's (and Docker's).
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Image makes the tree one gzip layer of an image with OCI media types,
// linux/amd64, created at epoch, that runs as cfg says.
func (r *Root) Image(cfg v1.Config) (v1.Image, error) {
	level := gzip.BestCompression
	if r.Fast {
		level = gzip.BestSpeed
	}
	layerTar, err := r.tar()
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(level))
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}

// CheckStatic refuses a dynamically linked program: the images built here
// hold only the libraries their tools need, and a static program none.
func CheckStatic(p string) error {
	out, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	// An ELF with a PT_INTERP segment names its loader; a static one has none.
	if bytes.Contains(out[:min(len(out), 4096)], []byte("/lib64/ld-linux")) {
		return errors.New("dynamically linked: build it with CGO_ENABLED=0")
	}
	return nil
}

// tar writes the tree as an uncompressed layer, entries sorted, owned by
// root, every time epoch.
func (r *Root) tar() ([]byte, error) {
	paths := make([]string, 0, len(r.files))
	for p := range r.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := r.files[p]
		h := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    int64(f.mode.Perm()),
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		if f.mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000 // c_ISVTX
		}
		var body io.Reader
		switch {
		case f.mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.mode&os.ModeSymlink != 0:
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		case f.src != "":
			b, err := os.ReadFile(f.src)
			if err != nil {
				return nil, err
			}
			h.Typeflag, h.Size, body = tar.TypeReg, int64(len(b)), bytes.NewReader(b)
		default:
			h.Typeflag, h.Size, body = tar.TypeReg, int64(len(f.data)), bytes.NewReader(f.data)
		}
		for name, value := range f.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+name] = value
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if body != nil {
			if _, err := io.Copy(tw, body); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
