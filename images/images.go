package images

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/svcproxy/svcproxy/deploy/image"
)

// The names and tags of k8s.io/kubernetes v1.37.2's test/utils/image/manifest.go
// (registry.k8s.io/e2e-test-images is its PromoterE2eRegistry,
// registry.k8s.io its GcRegistry); TestRefsMatchKubernetes reads that file to
// check them.
const (
	AgnhostRef = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	BusyBoxRef = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
	// GlibcDNSTestingRef is the DNS tests' glibc prober (formerly
	// jessie-dnsutils): Debian with dnsutils.
	GlibcDNSTestingRef = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"
	NginxRef           = "registry.k8s.io/e2e-test-images/nginx:1.27.0-2"
	// PauseRef is the e2e tests' Pause and the node's sandbox image:
	// containerd's sandbox_image must name it.
	PauseRef = "registry.k8s.io/pause:3.10.2"
)

// Config says where the Go programs are: files of this machine, each set
// only for the images that hold it (Spec.Needs).
type Config struct {
	// The e2e images' programs, both static.
	Agnhost string // k8s.io/kubernetes/test/images/agnhost, CGO_ENABLED=0
	Pause   string // ./images/pause, CGO_ENABLED=0
	// kubeadm's images' programs (internal/k8sbin): the Kubernetes ones and
	// etcd as the go command builds them (with the C library, which the
	// images hold), CoreDNS static.
	KubeAPIServer         string
	KubeControllerManager string
	KubeScheduler         string
	KubeProxy             string
	CoreDNS               string
	Etcd, Etcdctl         string // kubeadm's version, not the API server tests'
	// Kindnet is images/kindnet, static: the kind node image's pod network.
	Kindnet string
}

// program returns the field of the program named name ("kube-proxy"), or
// nil for a name no image holds.
func (c *Config) program(name string) *string {
	switch name {
	case "agnhost":
		return &c.Agnhost
	case "pause":
		return &c.Pause
	case "kube-apiserver":
		return &c.KubeAPIServer
	case "kube-controller-manager":
		return &c.KubeControllerManager
	case "kube-scheduler":
		return &c.KubeScheduler
	case "kube-proxy":
		return &c.KubeProxy
	case "coredns":
		return &c.CoreDNS
	case "etcd":
		return &c.Etcd
	case "etcdctl":
		return &c.Etcdctl
	case "kindnet":
		return &c.Kindnet
	}
	return nil
}

// SetProgram says that the program name ("kube-proxy") is the file.
func (c *Config) SetProgram(name, file string) error {
	p := c.program(name)
	if p == nil {
		return fmt.Errorf("no image holds a program %q", name)
	}
	*p = file
	return nil
}

// Missing returns the programs s needs that c does not name.
func (c Config) Missing(s Spec) []string {
	var missing []string
	for _, n := range s.Needs {
		if p := c.program(n); p == nil || *p == "" {
			missing = append(missing, n)
		}
	}
	return missing
}

// Spec is one image: its name, its archive's file name, how it is built.
type Spec struct {
	Ref  string // the name the e2e tests (or kubeadm) ask for
	File string // "agnhost.tar"
	// Needs names the programs of Config the image holds: "agnhost", "pause",
	// "kube-proxy", ...
	Needs []string
	build func(Config) (v1.Image, error)
}

// Build builds the image from cfg.
func (s Spec) Build(cfg Config) (v1.Image, error) {
	img, err := s.build(cfg)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.Ref, err)
	}
	return img, nil
}

// All are the images, pause first (the node needs it for any pod).
func All() []Spec {
	return []Spec{
		pauseSpec,
		{Ref: BusyBoxRef, File: "busybox.tar", build: busybox},
		{Ref: GlibcDNSTestingRef, File: "glibc-dns-testing.tar", build: glibcDNSTesting},
		{Ref: AgnhostRef, File: "agnhost.tar", Needs: []string{"agnhost"}, build: agnhost},
		{Ref: NginxRef, File: "nginx.tar", Needs: []string{"agnhost"}, build: nginx},
	}
}

// pauseSpec is the e2e tests' pause and kubeadm's: one image.
var pauseSpec = Spec{Ref: PauseRef, File: "pause.tar", Needs: []string{"pause"}, build: pause}

// pause is build/pause's image: the program alone, run as 65535
// (build/pause/Dockerfile's USER).
func pause(cfg Config) (v1.Image, error) {
	var root image.Root
	if err := addStatic(&root, cfg.Pause, "/pause"); err != nil {
		return nil, err
	}
	return root.Image(v1.Config{
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
		Labels:     labels("pause", "pause.c's behaviour in Go (images/pause)"),
	})
}

// busybox is test/images/busybox's image, Docker's busybox:1.37.0 there:
// the applets, CMD sh. Debian's busybox-static is 1.35, linked statically
// against glibc.
func busybox(Config) (v1.Image, error) {
	root := base()
	if err := addBusybox(root, nil); err != nil {
		return nil, err
	}
	return root.Image(v1.Config{
		Cmd:    []string{"sh"},
		Env:    []string{image.DefaultPath},
		Labels: labels("busybox", "Debian's busybox-static and its applets"),
	})
}

// dnsTools are the DNS tests' commands from Debian's packages: dig and
// nslookup (dnsutils), host (bind9-host), getent (libc-bin, glibc's
// resolver: the point of the glibc prober), and dash as /bin/sh, Debian's
// shell. Not busybox's sh: Debian's busybox-static runs some of its own
// applets in preference to PATH (`ip` in it is busybox's, not iproute2's),
// so the tests' `sh -c` scripts might not run the Debian tools the image has.
var dnsTools = []image.Tool{
	{Name: "/bin/sh", Target: "/usr/bin/dash"},
	{Name: "/usr/bin/dig"}, {Name: "/usr/bin/nslookup"}, {Name: "/usr/bin/host"}, {Name: "/usr/bin/getent"},
}

// glibcDNSTesting is test/images/glibc-dns-testing's image (Debian bookworm
// with dnsutils): the DNS tests run `sh -c` scripts of dig, getent, test,
// seq and sleep in it. The utilities are busybox's here, not coreutils.
func glibcDNSTesting(Config) (v1.Image, error) {
	root := base()
	if err := addBusybox(root, dnsTools); err != nil {
		return nil, err
	}
	if err := root.AddTools(dnsTools); err != nil {
		return nil, err
	}
	return root.Image(v1.Config{
		Cmd:    []string{"sh"},
		Env:    []string{image.DefaultPath},
		Labels: labels("glibc-dns-testing", "Debian's dash, dig, nslookup, host and getent with their libraries; busybox"),
	})
}

// agnhostTools are what the Service and DNS tests run in agnhost besides
// agnhost itself: Alpine's bind-tools, curl, netcat-openbsd and iproute2 in
// Kubernetes' image, Debian's here. wget is GNU wget, as in Kubernetes'
// image (busybox's has no -T here: wgetTimeout).
var agnhostTools = append([]image.Tool{
	{Name: "/usr/bin/curl"}, {Name: "/usr/bin/wget"}, {Name: "/usr/bin/nc", Target: "/usr/bin/nc.openbsd"},
	{Name: "/usr/bin/ip"}, {Name: "/usr/bin/ss"},
}, dnsTools...)

// agnhost is test/images/agnhost's image: /agnhost and its second name
// agnhost-2, the tools, /uploads (netexec), the user and group the
// SupplementalGroups test expects, ENTRYPOINT /agnhost, CMD pause. Its dig
// is glibc's here, not musl's: the DNS tests' "musl" prober asks the same
// server through a different resolver library in Kubernetes' image only.
// Left out: coredns (only the DNS ConfigMap tests run it) and porter's
// certificate (the Proxy tests).
func agnhost(cfg Config) (v1.Image, error) {
	root := base()
	root.AddFile("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
		"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"))
	root.AddFile("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"+
		"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"))
	root.AddDir("/uploads", 0o755)
	if err := addStatic(root, cfg.Agnhost, "/agnhost"); err != nil {
		return nil, err
	}
	root.AddSymlink("/agnhost-2", "agnhost")
	if err := addBusybox(root, agnhostTools); err != nil {
		return nil, err
	}
	if err := root.AddTools(agnhostTools); err != nil {
		return nil, err
	}
	return root.Image(v1.Config{
		Entrypoint: []string{"/agnhost"},
		Cmd:        []string{"pause"},
		Env:        []string{image.DefaultPath},
		Labels:     labels("agnhost", "agnhost "+AgnhostRef[strings.LastIndexByte(AgnhostRef, ':')+1:]+" from k8s.io/kubernetes v1.37.2; busybox; Debian's dash, curl, wget, nc, ip, ss, dig, nslookup, host, getent"),
	})
}

// nginx stands in for test/images/nginx: the EndpointSlice and Endpoints
// tests only need a pod with port 80 that runs; agnhost's test-webserver
// serves HTTP on port 80. Not nginx: say so wherever it shows.
func nginx(cfg Config) (v1.Image, error) {
	var root image.Root
	root.AddDir("/tmp", os.ModeSticky|0o777)
	if err := addStatic(&root, cfg.Agnhost, "/agnhost"); err != nil {
		return nil, err
	}
	return root.Image(v1.Config{
		Entrypoint: []string{"/agnhost", "test-webserver", "--port=80"},
		Labels:     labels("nginx", "a stand-in, not nginx: agnhost test-webserver on port 80"),
	})
}

// base is the tree every image with a shell starts from: the directories a
// runtime mounts over, /tmp, this machine's /etc/protocols and /etc/services,
// users root and nobody, and an nsswitch.conf for glibc's getent.
func base() *image.Root {
	root := &image.Root{}
	for _, d := range []string{"/etc", "/root", "/proc", "/sys", "/dev", "/run", "/var/run"} {
		root.AddDir(d, 0o755)
	}
	root.AddDir("/tmp", os.ModeSticky|0o777)
	root.AddFile("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"))
	root.AddFile("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	root.AddFile("/etc/nsswitch.conf", 0o644, []byte("hosts: files dns\nnetworks: files\n"))
	for _, f := range []string{"/etc/protocols", "/etc/services"} {
		if _, err := os.Stat(f); err == nil {
			root.AddHostFile(f)
		}
	}
	return root
}

// busyboxPath is Debian's busybox-static.
const busyboxPath = "/usr/bin/busybox"

// addBusybox puts busybox at /bin/busybox and links each of its applets to
// it where `busybox --list-full` says it lives, except those the image gets
// from Debian's packages (skip).
func addBusybox(root *image.Root, skip []image.Tool) error {
	if err := image.CheckStatic(busyboxPath); err != nil {
		return fmt.Errorf("busybox: %w (the busybox-static package; make deps)", err)
	}
	out, err := exec.Command(busyboxPath, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("busybox --list-full: %w", err)
	}
	if err := root.CopyFile(busyboxPath, "/bin/busybox", 0o755); err != nil {
		return err
	}
	skipped := map[string]bool{}
	for _, t := range skip {
		skipped[path.Base(t.Name)] = true
	}
	// Without -T in its wget, the applet gives way to wgetTimeout.
	help, _ := exec.Command(busyboxPath, "wget", "--help").CombinedOutput()
	shimWget := !strings.Contains(string(help), "-T SEC")
	for _, applet := range strings.Fields(string(out)) {
		p := "/" + applet
		if skipped[path.Base(p)] || p == "/bin/busybox" {
			continue
		}
		if path.Base(p) == "wget" && shimWget {
			root.AddFile(p, 0o755, []byte(wgetTimeout))
			continue
		}
		rel := strings.Repeat("../", strings.Count(p, "/")-1) + "bin/busybox"
		root.AddSymlink(p, rel)
	}
	return nil
}

// wgetTimeout is the images' wget where busybox's has no -T: Debian's
// busybox-static before 1.36.1-5 (Debian 12's is 1.35) is built without
// FEATURE_WGET_TIMEOUT, and its wget then dies of SIGSEGV (exit status
// 139) on -T, in a container or not: getopt32 still takes the option and
// writes its number through the missing setting's NULL pointer. Kubernetes'
// busybox image (Docker's 1.37) has -T, and scripts use it. This wget takes
// -T SEC, -TSEC and --timeout=SEC itself and runs busybox's under busybox's
// timeout: SEC limits the whole transfer, where -T limits each wait for the
// network; a transfer cut off says so and exits 1, as busybox's -T does.
const wgetTimeout = `#!/bin/sh
# busybox's wget without -T (FEATURE_WGET_TIMEOUT), which it would crash
# on: -T SEC becomes timeout SEC around the whole transfer.
t=
for a do
	shift
	if [ -n "$want" ]; then t=$a; want=; continue; fi
	case $a in
	-T | --timeout) want=1 ;;
	-T*) t=${a#-T} ;;
	--timeout=*) t=${a#--timeout=} ;;
	*) set -- "$@" "$a" ;;
	esac
done
[ -n "$t" ] || exec busybox wget "$@"
timeout "$t" busybox wget "$@"
rc=$?
if [ "$rc" = 143 ]; then
	echo "wget: download timed out" >&2
	exit 1
fi
exit "$rc"
`

// addStatic copies a static program into the image as p.
func addStatic(root *image.Root, src, p string) error {
	if src == "" {
		return fmt.Errorf("%s: no program given", p)
	}
	if err := image.CheckStatic(src); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return root.CopyFile(src, p, 0o755)
}

func labels(title, description string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": description + " (built by svcproxy's images package for a node without a registry)",
	}
}

// Write builds each of specs and writes it to dir/File, returning the files
// written.
func Write(dir string, cfg Config, specs []Spec) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, s := range specs {
		img, err := s.Build(cfg)
		if err != nil {
			return files, err
		}
		f := path.Join(dir, s.File)
		if err := image.WriteArchive(f, img, s.Ref); err != nil {
			return files, fmt.Errorf("image %s: %w", s.Ref, err)
		}
		files = append(files, f)
	}
	return files, nil
}
