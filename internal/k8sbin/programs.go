package k8sbin

import (
	"fmt"
	"strings"
)

// What is built, from which module under test/kapi, in which cache set.

// module is one of the nested Go modules under test/kapi.
type module struct {
	dir     string                      // under test/kapi
	dep     string                      // the module that holds the commands; its version is in the key
	ldflags func(version string) string // nil: none
}

var (
	kubernetes = module{dir: "apiserver", dep: "k8s.io/kubernetes", ldflags: kubeLDFlags}
	etcd       = module{dir: "etcd", dep: "go.etcd.io/etcd/server/v3"}
	// controlPlane is k8s.io/kubernetes again, at the same version, with the
	// requirements kubectl adds; a module of its own so that adding them did
	// not change apiserver/'s go.sum, and with it the cached kube-apiserver's key.
	controlPlane = module{dir: "controlplane", dep: "k8s.io/kubernetes", ldflags: kubeLDFlags}
	// node is k8s.io/kubernetes once more, for kubelet and kube-scheduler:
	// the kubelet requires modules controlplane/ does not (hnslib, cri-streaming,
	// otelrestful), and adding them there would have changed its go.mod, and
	// with it the cached kube-controller-manager's key.
	node = module{dir: "node", dep: "k8s.io/kubernetes", ldflags: kubeLDFlags}
	// conformance is k8s.io/kubernetes for e2e.test and agnhost, whose
	// requirements (ginkgo, gomega, the storage tests' cloud clients) neither
	// the control plane nor the node needs.
	conformance = module{dir: "conformance", dep: "k8s.io/kubernetes", ldflags: kubeLDFlags}
	// cluster is k8s.io/kubernetes for kubeadm and kube-proxy, the programs a
	// kubeadm cluster adds to the node's: kubeadm requires two modules no
	// other set does (k8s.io/system-validators, corefile-migration).
	cluster = module{dir: "cluster", dep: "k8s.io/kubernetes", ldflags: kubeLDFlags}
	// coreDNS is CoreDNS at the version kubeadm deploys: its constants'
	// CoreDNSVersion, the tag of registry.k8s.io/coredns/coredns.
	coreDNS = module{dir: "coredns", dep: "github.com/coredns/coredns", ldflags: coreDNSLDFlags}
	// clusterEtcd is etcd at the version kubeadm deploys (DefaultEtcdVersion
	// 3.7.0-0), for the etcd image of its static pod. The API server's tests
	// keep the etcd of their own module: changing it would rebuild their set.
	clusterEtcd = module{dir: "clusteretcd", dep: "go.etcd.io/etcd/server/v3"}
	// kind is sigs.k8s.io/kind v0.33.0, the tool that runs a cluster in
	// containers of a Docker daemon (docs/kind.md).
	kind = module{dir: "kind", dep: "sigs.k8s.io/kind"}
)

// program is one command and the module that builds it.
type program struct {
	mod module
	pkg string // the command's package
	// out is the binary's file name. One that is not the package's last
	// element (etcd's package path ends in /v3) gets a go build of its own,
	// whose -o names the file.
	out string
	// test builds the package's test binary (go test -c), as Kubernetes
	// builds e2e.test, instead of a command.
	test bool
	// env is added to the go command's environment (CGO_ENABLED=0 for a
	// program that goes into a container image without a libc).
	env []string
	// field is where Build reports the program's path.
	field func(*Binaries) *string
}

// set is a group of programs cached together, in one directory named by their
// versions and a hash of their modules' go.mod and go.sum. Sets are cached
// apart so that asking for a new one never invalidates one already built:
// the control plane's programs were added after the API server's.
type set []program

var (
	apiServerSet = set{
		{mod: kubernetes, pkg: "k8s.io/kubernetes/cmd/kube-apiserver", out: "kube-apiserver",
			field: func(b *Binaries) *string { return &b.APIServer }},
		{mod: etcd, pkg: "go.etcd.io/etcd/server/v3", out: "etcd",
			field: func(b *Binaries) *string { return &b.Etcd }},
	}
	// The same versions as kube-apiserver's module: the packages they share
	// come compiled from the go build cache.
	controlPlaneSet = set{
		{mod: controlPlane, pkg: "k8s.io/kubernetes/cmd/kube-controller-manager", out: "kube-controller-manager",
			field: func(b *Binaries) *string { return &b.ControllerManager }},
		{mod: controlPlane, pkg: "k8s.io/kubernetes/cmd/kubectl", out: "kubectl",
			field: func(b *Binaries) *string { return &b.Kubectl }},
	}
	// kubelet is built as hack/lib/golang.sh builds it, with cgo left as the
	// go command has it (kubelet is not in KUBE_STATIC_BINARIES), which is
	// also how the other programs here are built: one setting, one go build
	// cache for all.
	nodeSet = set{
		{mod: node, pkg: "k8s.io/kubernetes/cmd/kubelet", out: "kubelet",
			field: func(b *Binaries) *string { return &b.Kubelet }},
		{mod: node, pkg: "k8s.io/kubernetes/cmd/kube-scheduler", out: "kube-scheduler",
			field: func(b *Binaries) *string { return &b.Scheduler }},
	}
	// e2e.test is built as hack/lib/golang.sh builds its test targets, `go
	// test -c`; its manifests and test data are embedded (go:embed), nothing
	// is generated first. agnhost as test/images/image-util.sh builds it for
	// its image, CGO_ENABLED=0: the images built from it have no libc.
	conformanceSet = set{
		{mod: conformance, pkg: "k8s.io/kubernetes/test/e2e", out: "e2e.test", test: true,
			field: func(b *Binaries) *string { return &b.E2ETest }},
		{mod: conformance, pkg: "k8s.io/kubernetes/test/images/agnhost", out: "agnhost", env: []string{"CGO_ENABLED=0"},
			field: func(b *Binaries) *string { return &b.Agnhost }},
	}
	// kubeadm and kube-proxy are built as the node's programs are, cgo as the
	// go command has it: Kubernetes' release builds both static
	// (KUBE_STATIC_BINARIES), and the images hold them with the C library
	// they link (images), so that one go build cache serves every
	// Kubernetes program here.
	clusterSet = set{
		{mod: cluster, pkg: "k8s.io/kubernetes/cmd/kubeadm", out: "kubeadm",
			field: func(b *Binaries) *string { return &b.Kubeadm }},
		{mod: cluster, pkg: "k8s.io/kubernetes/cmd/kube-proxy", out: "kube-proxy",
			field: func(b *Binaries) *string { return &b.KubeProxy }},
	}
	// CoreDNS as its Makefile builds its releases: CGO_ENABLED=0, -s -w.
	coreDNSSet = set{
		{mod: coreDNS, pkg: "github.com/coredns/coredns", out: "coredns", env: []string{"CGO_ENABLED=0"},
			field: func(b *Binaries) *string { return &b.CoreDNS }},
	}
	// etcd and etcdctl, as registry.k8s.io/etcd holds them.
	clusterEtcdSet = set{
		{mod: clusterEtcd, pkg: "go.etcd.io/etcd/server/v3", out: "etcd",
			field: func(b *Binaries) *string { return &b.ClusterEtcd }},
		{mod: clusterEtcd, pkg: "go.etcd.io/etcd/etcdctl/v3", out: "etcdctl",
			field: func(b *Binaries) *string { return &b.ClusterEtcdctl }},
	}
	// kind as its Makefile builds it, CGO_ENABLED=0 (its version is a
	// constant of its source; the Makefile stamps only the git commit,
	// which a module from the proxy has none of).
	kindSet = set{
		{mod: kind, pkg: "sigs.k8s.io/kind", out: "kind", env: []string{"CGO_ENABLED=0"},
			field: func(b *Binaries) *string { return &b.Kind }},
	}
)

// coreDNSLDFlags are CoreDNS's Makefile's, without the git commit it stamps
// from its own checkout (a module from the proxy has none).
func coreDNSLDFlags(string) string { return "-s -w" }

// kubeLDFlags stamps what the Kubernetes release build stamps
// (hack/lib/version.sh), so that /version reports v1.37.2 and not v0.0.0-master.
func kubeLDFlags(version string) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	const pkg = "k8s.io/component-base/version"
	return fmt.Sprintf("-X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s -X %[1]s.gitTreeState=clean",
		pkg, version, major, minor)
}
