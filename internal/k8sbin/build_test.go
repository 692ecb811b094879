package k8sbin

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRequiredVersion(t *testing.T) {
	gomod := []byte(`module example.com/m

go 1.26.0

require k8s.io/kubernetes v1.37.2

require (
	go.etcd.io/etcd/server/v3 v3.6.16
	k8s.io/api v0.0.0 // indirect
)

replace k8s.io/api => k8s.io/api v0.37.2
`)
	tests := []struct {
		dep, want, err string
	}{
		{dep: "k8s.io/kubernetes", want: "v1.37.2"},
		{dep: "go.etcd.io/etcd/server/v3", want: "v3.6.16"},
		{dep: "k8s.io/api", want: "v0.0.0"},
		{dep: "k8s.io/client-go", err: "require k8s.io/client-go: not found"},
	}
	for _, tt := range tests {
		got, err := requiredVersion(gomod, tt.dep)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("requiredVersion(%s) = %q, %v; want error %q", tt.dep, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("requiredVersion(%s) = %q, %v; want %q", tt.dep, got, err, tt.want)
		}
	}
}

func TestKubeLDFlags(t *testing.T) {
	got := kubeLDFlags("v1.37.2")
	for _, want := range []string{".gitVersion=v1.37.2", ".gitMajor=1 ", ".gitMinor=37 "} {
		if !strings.Contains(got, want) {
			t.Errorf("kubeLDFlags(v1.37.2) = %q, want it to contain %q", got, want)
		}
	}
}

// TestBuildCached checks the repository's own pins produce keys named by
// their versions, that complete cache directories are used as they are
// (nothing is built, so this runs in milliseconds), and that the control
// plane's and the node's programs are sets of their own: missing, they make
// only a request for them fail, not one for the API server alone.
func TestBuildCached(t *testing.T) {
	cache := t.TempDir()
	kapiDir := filepath.Join("..", "..", "test", "kapi")
	key, versions, err := cacheKey(kapiDir, apiServerSet)
	if err != nil {
		t.Fatal(err)
	}
	kube, etcdV := versions["k8s.io/kubernetes"], versions["go.etcd.io/etcd/server/v3"]
	if !strings.HasPrefix(key, "kube-apiserver-"+kube+"_etcd-"+etcdV+"_") {
		t.Errorf("cache key %q does not name the versions %v", key, versions)
	}
	cpKey, _, err := cacheKey(kapiDir, controlPlaneSet)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cpKey, "kube-controller-manager-"+kube+"_kubectl-"+kube+"_") {
		t.Errorf("control plane cache key %q does not name the version %s", cpKey, kube)
	}
	fill := func(key string, files ...string) string {
		dir := filepath.Join(cache, key)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	dir := fill(key, "kube-apiserver", "etcd")
	bins, err := Build(context.Background(), Config{CacheDir: cache, CachedOnly: true})
	if err != nil {
		t.Fatalf("Build with a complete cache: %v", err)
	}
	want := Binaries{APIServer: filepath.Join(dir, "kube-apiserver"), Etcd: filepath.Join(dir, "etcd"), Key: key}
	if bins != want {
		t.Errorf("Build = %+v, want %+v", bins, want)
	}
	if _, err := Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, ControlPlane: true}); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Build(ControlPlane) without its programs cached: %v, want ErrNotBuilt", err)
	}
	cpDir := fill(cpKey, "kube-controller-manager", "kubectl")
	bins, err = Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, ControlPlane: true})
	if err != nil {
		t.Fatalf("Build(ControlPlane) with a complete cache: %v", err)
	}
	want.ControllerManager = filepath.Join(cpDir, "kube-controller-manager")
	want.Kubectl = filepath.Join(cpDir, "kubectl")
	if bins != want {
		t.Errorf("Build(ControlPlane) = %+v, want %+v", bins, want)
	}

	// The node's programs: a set of their own again, named by their version,
	// asked for with or without the control plane's.
	nodeKey, _, err := cacheKey(kapiDir, nodeSet)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(nodeKey, "kubelet-"+kube+"_kube-scheduler-"+kube+"_") {
		t.Errorf("node cache key %q does not name the version %s", nodeKey, kube)
	}
	if _, err := Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, ControlPlane: true, Node: true}); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Build(Node) without its programs cached: %v, want ErrNotBuilt", err)
	}
	nodeDir := fill(nodeKey, "kubelet", "kube-scheduler")
	bins, err = Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, ControlPlane: true, Node: true})
	if err != nil {
		t.Fatalf("Build(ControlPlane, Node) with a complete cache: %v", err)
	}
	want.Kubelet = filepath.Join(nodeDir, "kubelet")
	want.Scheduler = filepath.Join(nodeDir, "kube-scheduler")
	if bins != want {
		t.Errorf("Build(ControlPlane, Node) = %+v, want %+v", bins, want)
	}
	bins, err = Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, Node: true})
	if err != nil {
		t.Fatalf("Build(Node) with a complete cache: %v", err)
	}
	want.ControllerManager, want.Kubectl = "", ""
	if bins != want {
		t.Errorf("Build(Node) = %+v, want %+v", bins, want)
	}

	confKey, _, err := cacheKey(kapiDir, conformanceSet)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(confKey, "e2e.test-"+kube+"_agnhost-"+kube+"_") {
		t.Errorf("conformance cache key %q does not name the version %s", confKey, kube)
	}
	if _, err := Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, Conformance: true}); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Build(Conformance) without its programs cached: %v, want ErrNotBuilt", err)
	}
	confDir := fill(confKey, "e2e.test", "agnhost")
	bins, err = Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, Conformance: true})
	if err != nil {
		t.Fatalf("Build(Conformance) with a complete cache: %v", err)
	}
	want.Kubelet, want.Scheduler = "", ""
	want.E2ETest, want.Agnhost = filepath.Join(confDir, "e2e.test"), filepath.Join(confDir, "agnhost")
	if bins != want {
		t.Errorf("Build(Conformance) = %+v, want %+v", bins, want)
	}

	// The cluster's programs: three sets, named by three versions, asked
	// for together (Cluster) or kube-proxy's and CoreDNS's alone.
	clusterKey, _, err := cacheKey(kapiDir, clusterSet)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(clusterKey, "kubeadm-"+kube+"_kube-proxy-"+kube+"_") {
		t.Errorf("cluster cache key %q does not name the version %s", clusterKey, kube)
	}
	dnsKey, dnsVersions, err := cacheKey(kapiDir, coreDNSSet)
	if err != nil {
		t.Fatal(err)
	}
	if v := dnsVersions["github.com/coredns/coredns"]; !strings.HasPrefix(dnsKey, "coredns-"+v+"_") || v == "" {
		t.Errorf("CoreDNS cache key %q does not name its version %q", dnsKey, v)
	}
	etcdKey, etcdVersions, err := cacheKey(kapiDir, clusterEtcdSet)
	if err != nil {
		t.Fatal(err)
	}
	if v := etcdVersions["go.etcd.io/etcd/server/v3"]; !strings.HasPrefix(etcdKey, "etcd-"+v+"_etcdctl-"+v+"_") || v == etcdV {
		t.Errorf("kubeadm's etcd cache key %q: want etcd and etcdctl %q, not the tests' %s", etcdKey, v, etcdV)
	}
	want = Binaries{APIServer: want.APIServer, Etcd: want.Etcd, Key: key}
	dnsDir := fill(dnsKey, "coredns")
	bins, err = Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, CoreDNS: true})
	if err != nil {
		t.Fatalf("Build(CoreDNS) with it cached: %v", err)
	}
	want.CoreDNS = filepath.Join(dnsDir, "coredns")
	if bins != want {
		t.Errorf("Build(CoreDNS) = %+v, want %+v", bins, want)
	}
	if _, err := Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, KubeProxy: true}); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Build(KubeProxy) without it cached: %v, want ErrNotBuilt", err)
	}
	clusterDir := fill(clusterKey, "kubeadm", "kube-proxy")
	if _, err := Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, Cluster: true}); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Build(Cluster) without kubeadm's etcd cached: %v, want ErrNotBuilt", err)
	}
	etcdDir := fill(etcdKey, "etcd", "etcdctl")
	bins, err = Build(context.Background(), Config{CacheDir: cache, CachedOnly: true, Cluster: true})
	if err != nil {
		t.Fatalf("Build(Cluster) with a complete cache: %v", err)
	}
	want.Kubeadm, want.KubeProxy = filepath.Join(clusterDir, "kubeadm"), filepath.Join(clusterDir, "kube-proxy")
	want.ClusterEtcd, want.ClusterEtcdctl = filepath.Join(etcdDir, "etcd"), filepath.Join(etcdDir, "etcdctl")
	if bins != want {
		t.Errorf("Build(Cluster) = %+v, want %+v", bins, want)
	}
}

// TestBuildModuleCommands checks the go commands buildModule runs, with a
// fake go that logs its arguments and CGO_ENABLED and writes each -o file:
// commands share one go build, a test binary gets go test -c, a program with
// an environment of its own a go build of its own.
func TestBuildModuleCommands(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "log")
	fakeGo := filepath.Join(dir, "go")
	script := `#!/bin/sh
echo "CGO_ENABLED=${CGO_ENABLED:-} $*" >> ` + logFile + `
while [ $# -gt 0 ]; do
	if [ "$1" = -o ]; then case "$2" in */) touch "$2"/x ;; *) touch "$2" ;; esac; fi
	shift
done
`
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CGO_ENABLED", "")
	work := t.TempDir()
	m := module{dir: "m", dep: "example.com/k", ldflags: func(v string) string { return "-X v=" + v }}
	progs := []program{
		{mod: m, pkg: "example.com/k/cmd/a", out: "a"},
		{mod: m, pkg: "example.com/k/test/e2e", out: "e2e.test", test: true},
		{mod: m, pkg: "example.com/k/cmd/b", out: "b"},
		{mod: m, pkg: "example.com/k/cmd/static", out: "static", env: []string{"CGO_ENABLED=0"}},
		{mod: m, pkg: "example.com/k/server/v3", out: "server"},
	}
	if err := buildModule(context.Background(), fakeGo, dir, m, "v1.2.3", progs, work, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"CGO_ENABLED= mod download example.com/k",
		"CGO_ENABLED= build -o " + work + "/ -trimpath -ldflags -X v=v1.2.3 example.com/k/cmd/a example.com/k/cmd/b",
		"CGO_ENABLED= test -c -o " + work + "/e2e.test -trimpath -ldflags -X v=v1.2.3 example.com/k/test/e2e",
		"CGO_ENABLED=0 build -o " + work + "/static -trimpath -ldflags -X v=v1.2.3 example.com/k/cmd/static",
		"CGO_ENABLED= build -o " + work + "/server -trimpath -ldflags -X v=v1.2.3 example.com/k/server/v3",
	}, "\n") + "\n"
	if string(b) != want {
		t.Errorf("go commands:\n%s\nwant:\n%s", b, want)
	}
}

// TestSetsApart checks that no module builds programs of two sets (a program
// added to a module already cached would change its go.sum, and with it the
// key of programs already built), and that each program has a Binaries field
// of its own.
func TestSetsApart(t *testing.T) {
	owner := map[string]string{}
	var b Binaries
	field := map[*string]string{}
	for name, s := range map[string]set{"apiserver": apiServerSet, "controlplane": controlPlaneSet, "node": nodeSet,
		"conformance": conformanceSet, "cluster": clusterSet, "coredns": coreDNSSet, "clusteretcd": clusterEtcdSet, "kind": kindSet} {
		for _, p := range s {
			if o, ok := owner[p.mod.dir]; ok && o != name {
				t.Errorf("module %s builds programs of the sets %s and %s", p.mod.dir, o, name)
			}
			owner[p.mod.dir] = name
			if o, ok := field[p.field(&b)]; ok {
				t.Errorf("%s and %s share a Binaries field", o, p.out)
			}
			field[p.field(&b)] = p.out
		}
	}
}

// TestLock checks that a second locker waits and gives up with its context.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.lock")
	unlock, err := lock(context.Background(), path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// flock locks belong to the open file description, so a second open in
	// the same process conflicts just as another process would.
	if _, err := lock(ctx, path, io.Discard); err == nil {
		t.Fatal("second lock while held: got nil error, want context canceled")
	}
	unlock()
	unlock2, err := lock(context.Background(), path, io.Discard)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}
