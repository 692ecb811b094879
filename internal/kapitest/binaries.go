package kapitest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/k8sbin"
)

// buildTimeout bounds a cold build; `go test`'s own -timeout (10 min by
// default) may stop it sooner, which is why `make test` builds first.
const buildTimeout = 30 * time.Minute

// deadlineMargin is left of a test's deadline when a build is cut short, for
// the test to fail and clean up.
const deadlineMargin = 30 * time.Second

// built is one Build's outcome, once per test binary.
type built struct {
	once sync.Once
	bins k8sbin.Binaries
	err  error
	took time.Duration
}

var binaries, controlPlane, node, conformance, clusterBins built

// Binaries finds kube-apiserver and etcd, cached outside the repository keyed
// by their versions ($XDG_CACHE_HOME or ~/.cache, under svcproxy/kapi/<versions>/).
// `make kapi` (test/kapi/build.sh) builds them, and `make test` runs it first:
// a cold build takes 5 to 30 minutes, too long to hide inside a plain
// `go test ./...`, so without them the test skips and says so, unless
// SVCPROXY_KAPI_BUILD=1 asks to build them here. It skips the test if go or
// the module proxy is unavailable, and fails it if the build itself fails. A
// test process builds at most once; other processes wait on a file lock for
// the one that builds.
func Binaries(t testing.TB) k8sbin.Binaries {
	t.Helper()
	return find(t, &binaries, k8sbin.Config{}, "make kapi")
}

// ControlPlaneBinaries is Binaries with kube-controller-manager and kubectl
// as well (Binaries.ControllerManager and Binaries.Kubectl).
func ControlPlaneBinaries(t testing.TB) k8sbin.Binaries {
	t.Helper()
	return find(t, &controlPlane, k8sbin.Config{ControlPlane: true}, "make kapi")
}

// NodeBinaries is ControlPlaneBinaries with kubelet and kube-scheduler as
// well (Binaries.Kubelet and Binaries.Scheduler), for the real-node lab.
// `make test` does not build them: without them the test skips and names
// `make node-bins`.
func NodeBinaries(t testing.TB) k8sbin.Binaries {
	t.Helper()
	return find(t, &node, k8sbin.Config{ControlPlane: true, Node: true}, "make node-bins")
}

// ConformanceBinaries is NodeBinaries with Kubernetes' e2e.test and agnhost
// as well (Binaries.E2ETest and Binaries.Agnhost). `make test` does not
// build them: without them the test skips and names `make conformance-bins`.
func ConformanceBinaries(t testing.TB) k8sbin.Binaries {
	t.Helper()
	return find(t, &conformance, k8sbin.Config{ControlPlane: true, Node: true, Conformance: true}, "make conformance-bins")
}

// ClusterBinaries is NodeBinaries with what a kubeadm cluster adds
// (Binaries.Kubeadm, KubeProxy, CoreDNS, ClusterEtcd and ClusterEtcdctl).
// `make test` does not build them: without them the test skips and names
// `make cluster-bins`.
func ClusterBinaries(t testing.TB) k8sbin.Binaries {
	t.Helper()
	return find(t, &clusterBins, k8sbin.Config{ControlPlane: true, Node: true, Cluster: true}, "make cluster-bins")
}

// find builds (or finds) what cfg asks for; advice names the make target that
// builds it.
func find(t testing.TB, binaries *built, cfg k8sbin.Config, advice string) k8sbin.Binaries {
	t.Helper()
	binaries.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		// Stop before `go test -timeout` panics, to fail with advice instead.
		if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
			if deadline, ok := d.Deadline(); ok {
				ctx, cancel = context.WithDeadline(ctx, deadline.Add(-deadlineMargin))
				defer cancel()
			}
		}
		start := time.Now()
		cfg.Log = logWriter{t}
		cfg.CachedOnly = os.Getenv("SVCPROXY_KAPI_BUILD") != "1"
		binaries.bins, binaries.err = k8sbin.Build(ctx, cfg)
		binaries.took = time.Since(start)
	})
	switch {
	case errors.Is(binaries.err, k8sbin.ErrNotBuilt):
		made := " (make test does)"
		if advice != "make kapi" {
			made = ""
		}
		t.Skipf("needs the Kubernetes programs: %v; run `%s` first%s, "+
			"or set SVCPROXY_KAPI_BUILD=1 to build them here", binaries.err, advice, made)
	case errors.Is(binaries.err, k8sbin.ErrUnavailable):
		t.Skipf("needs the Kubernetes programs, which cannot be built here: %v", binaries.err)
	case errors.Is(binaries.err, context.DeadlineExceeded):
		t.Fatalf("build the Kubernetes programs: not done before the test's deadline (%v); "+
			"a cold build takes minutes: run `%s` first, or raise go test -timeout. "+
			"What was compiled is kept in the go build cache.", binaries.err, advice)
	case binaries.err != nil:
		t.Fatalf("build the Kubernetes programs: %v", binaries.err)
	}
	return binaries.bins
}

// logWriter sends build progress to the test log of the first caller.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}
