package images

import (
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/svcproxy/svcproxy/deploy/image"
)

// The images kubeadm v1.37.2 runs, under the names `kubeadm config images
// list --kubernetes-version v1.37.2` prints (TestKubeadmRefs asks the built
// kubeadm): the control plane's static pods, the kube-proxy DaemonSet, the
// coredns Deployment, and PauseRef, the sandbox image.
const (
	KubeAPIServerRef         = "registry.k8s.io/kube-apiserver:v1.37.2"
	KubeControllerManagerRef = "registry.k8s.io/kube-controller-manager:v1.37.2"
	KubeSchedulerRef         = "registry.k8s.io/kube-scheduler:v1.37.2"
	KubeProxyRef             = "registry.k8s.io/kube-proxy:v1.37.2"
	// CoreDNSRef: cmd/kubeadm/app/constants' CoreDNSImageName under the
	// coredns/ path, at CoreDNSVersion.
	CoreDNSRef = "registry.k8s.io/coredns/coredns:v1.14.6"
	// EtcdRef: DefaultEtcdVersion "3.7.0-0", whose "-0" is the image's
	// revision of etcd v3.7.0.
	EtcdRef = "registry.k8s.io/etcd:3.7.0-0"
)

// Kubeadm are the images a cluster made by kubeadm runs, pause first.
//
// Kubernetes' own are distroless: the program on a base of users, CA
// certificates and time zones (go-runner's for the control plane, with
// /go-runner; distroless-iptables for kube-proxy, with the iptables tools
// and a wrapper that picks the backend). These hold the same programs, built
// from the Go module proxy (internal/k8sbin) at the versions kubeadm deploys,
// and what kubeadm's manifests make them run: each program in
// /usr/local/bin (or /coredns) and its entrypoint, the C library where the
// program links it, kube-proxy's tools from this machine's Debian packages
// (iptables-nft as iptables, as Debian's kubelet sees it). docs/kind.md
// lists the differences.
func Kubeadm() []Spec {
	return []Spec{
		pauseSpec,
		{Ref: KubeAPIServerRef, File: "kube-apiserver.tar", Needs: []string{"kube-apiserver"}, build: controlPlaneImage("kube-apiserver", KubeAPIServerRef)},
		{Ref: KubeControllerManagerRef, File: "kube-controller-manager.tar", Needs: []string{"kube-controller-manager"}, build: controlPlaneImage("kube-controller-manager", KubeControllerManagerRef)},
		{Ref: KubeSchedulerRef, File: "kube-scheduler.tar", Needs: []string{"kube-scheduler"}, build: controlPlaneImage("kube-scheduler", KubeSchedulerRef)},
		{Ref: EtcdRef, File: "etcd.tar", Needs: []string{"etcd", "etcdctl"}, build: etcd},
		{Ref: KubeProxyRef, File: "kube-proxy.tar", Needs: []string{"kube-proxy"}, build: kubeProxy},
		{Ref: CoreDNSRef, File: "coredns.tar", Needs: []string{"coredns"}, build: coreDNS},
	}
}

// programBase is the tree of kubeadm's images, distroless's layout: the
// directories a runtime mounts over, /tmp, users root, nobody and nonroot
// (65532), and an nsswitch.conf for the C library's lookups.
func programBase() *image.Root {
	// Fast: kubeadm's images are some 600 MB of programs, and go no
	// further than the lab's nodes.
	root := &image.Root{Fast: true}
	for _, d := range []string{"/etc", "/root", "/proc", "/sys", "/dev", "/run", "/var/run", "/usr/local/bin"} {
		root.AddDir(d, 0o755)
	}
	root.AddDir("/tmp", os.ModeSticky|0o777)
	root.AddDir("/home/nonroot", 0o700)
	root.AddFile("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
	root.AddFile("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n"))
	root.AddFile("/etc/nsswitch.conf", 0o644, []byte("hosts: files dns\nnetworks: files\n"))
	return root
}

// controlPlaneImage is the image of a static pod's program (kubeadm's
// manifests run it by name, through PATH).
func controlPlaneImage(name, ref string) func(Config) (v1.Image, error) {
	return func(cfg Config) (v1.Image, error) {
		root := programBase()
		p := "/usr/local/bin/" + name
		if err := root.AddProgram(*cfg.program(name), p); err != nil {
			return nil, err
		}
		return root.Image(v1.Config{
			Entrypoint: []string{p},
			Env:        []string{image.DefaultPath},
			Labels:     labels(name, name+" "+version(ref)+" from k8s.io/kubernetes, in /usr/local/bin"),
		})
	}
}

// etcd is kubeadm's etcd static pod's image: etcd and etcdctl v3.7.0 (the
// pod's probes are HTTP, /livez and /readyz on port 2381: nothing else runs
// in it). Kubernetes' image also has etcdutl and its migration scripts.
func etcd(cfg Config) (v1.Image, error) {
	root := programBase()
	root.AddDir("/var/lib/etcd", 0o700)
	for _, n := range []string{"etcd", "etcdctl"} {
		if err := root.AddProgram(*cfg.program(n), "/usr/local/bin/"+n); err != nil {
			return nil, err
		}
	}
	return root.Image(v1.Config{
		Entrypoint: []string{"/usr/local/bin/etcd"},
		Env:        []string{image.DefaultPath},
		Labels:     labels("etcd", "etcd and etcdctl v3.7.0 from go.etcd.io/etcd, in /usr/local/bin"),
	})
}

// kubeProxy is the kube-proxy DaemonSet's image: /usr/local/bin/kube-proxy
// (the DaemonSet's command) and what it runs: iptables, ip6tables and their
// -save and -restore with the nf_tables and legacy backends, nft (the
// nftables mode), ipset, conntrack and modprobe, with their libraries and the
// iptables extensions.
func kubeProxy(cfg Config) (v1.Image, error) {
	root := programBase()
	for _, d := range []string{"/lib/modules", "/var/lib/kube-proxy"} {
		root.AddDir(d, 0o755)
	}
	if err := root.AddProgram(cfg.KubeProxy, "/usr/local/bin/kube-proxy"); err != nil {
		return nil, err
	}
	if err := root.AddNetfilter(nil); err != nil {
		return nil, err
	}
	return root.Image(v1.Config{
		Entrypoint: []string{"/usr/local/bin/kube-proxy"},
		Env:        []string{image.DefaultPath},
		Labels: labels("kube-proxy", "kube-proxy "+version(KubeProxyRef)+" from k8s.io/kubernetes; "+
			"Debian's iptables (nf_tables and legacy), nft, ipset, conntrack and modprobe"),
	})
}

// capNetBindService is linux/capability.h's CAP_NET_BIND_SERVICE.
const capNetBindService = 10

// coreDNS is CoreDNS's own image (its Dockerfile): /coredns, static, with
// the file capability cap_net_bind_service=+ep, run as nonroot (65532): the
// coredns Deployment drops every capability but NET_BIND_SERVICE, and a
// process that is not root holds that one after exec only through the file's.
func coreDNS(cfg Config) (v1.Image, error) {
	root := programBase()
	if err := addStatic(root, cfg.CoreDNS, "/coredns"); err != nil {
		return nil, err
	}
	if err := root.SetFileCaps("/coredns", capNetBindService); err != nil {
		return nil, err
	}
	return root.Image(v1.Config{
		Entrypoint:   []string{"/coredns"},
		User:         "65532:65532",
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{"53/tcp": {}, "53/udp": {}},
		Labels:       labels("coredns", "CoreDNS "+version(CoreDNSRef)+" from github.com/coredns/coredns, static, cap_net_bind_service=+ep"),
	})
}

// version is a reference's tag.
func version(ref string) string { return ref[strings.LastIndexByte(ref, ':')+1:] }
