package hybrid

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// webNodePort is web as a NodePort Service (node port 30080) with the given
// externalTrafficPolicy.
func webNodePort(externalLocal bool) *service.Snapshot {
	snap := webSnapshot()
	svc := snap.Services()[0]
	svc.Type, svc.ExternalPolicyLocal = service.TypeNodePort, externalLocal
	svc.Ports[0].NodePort = 30080
	svc.Ports[0].Endpoints[0].NodeName = "node-a"
	return service.NewSnapshot([]*service.Service{svc}, nil)
}

// failingKernel makes the kernel path's restores fail while fail is set (the
// userspace portals' restores still work).
type failingKernel struct {
	*recorder
	fail bool
}

func (f *failingKernel) Restore(ctx context.Context, rules []byte) error {
	if f.fail && strings.Contains(string(rules), "SVCP-SERVICES") {
		return errors.New("injected failure")
	}
	return f.recorder.Restore(ctx, rules)
}

// caught checks that from the first state in which a path caught a new
// connection to web's VIP on, every state did, and returns the paths the
// port went through ([portal kernel]).
func caught(t *testing.T, what string, got []state) [][2]bool {
	t.Helper()
	var paths [][2]bool
	for i, s := range got {
		t.Logf("%s, step %d: %s", what, i, s)
		in := strings.HasPrefix(s.result, "REDIRECT") || strings.HasPrefix(s.result, "DNAT")
		if !in && len(paths) > 0 {
			t.Errorf("%s: a new connection to the VIP was caught by neither path: %s", what, s)
		}
		if p := [2]bool{s.portal, s.kernel}; in && (len(paths) == 0 || paths[len(paths)-1] != p) {
			paths = append(paths, p)
		}
	}
	return paths
}

func fmtPaths(p [][2]bool) string { return fmt.Sprint(p) }

// TestKernelFromStart: a port of a Service with externalTrafficPolicy Local
// and a node port goes to the kernel path at its first Sync, in a
// promotion's order (the kernel rules, then the portal goes), however cold
// it is, and the Promoter does not demote it; with policy Cluster it is the
// Promoter's again (demoted once quiet for DemoteAfter), and back to Local
// it returns to the kernel. If the kernel path cannot be installed, the port
// stays in userspace and the next Step tries again.
func TestKernelFromStart(t *testing.T) {
	rec := &failingKernel{recorder: &recorder{Fake: kiptables.NewFake()}}
	rec.SetLocalAddrs(nodeIP)
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	m := newTestMode(t, rec, clock)
	name := webSnapshot().Ports()[0].Name
	path := func() Path { return m.promoter.Path(name) }
	quiet := func(seconds int) {
		for range seconds {
			clock.now = clock.now.Add(time.Second)
			m.Step(ctx)
		}
	}
	port := func() Port {
		for _, p := range m.Status().(map[string]any)["ports"].([]Port) {
			if p.Name == name.String() {
				return p
			}
		}
		t.Fatalf("no %s in status", name)
		return Port{}
	}

	if err := m.Sync(ctx, webNodePort(true)); err != nil {
		t.Fatal(err)
	}
	if got, want := caught(t, "first sync", rec.take()), "[[true false] [true true] [false true]]"; fmtPaths(got) != want {
		t.Errorf("first sync: [portal kernel] went %v, want %s", got, want)
	}
	if path() != Kernel || !port().KernelFromStart {
		t.Fatalf("externalTrafficPolicy Local: path %s, status %+v; want kernel, kernelFromStart", path(), port())
	}
	quiet(5)
	if path() != Kernel {
		t.Fatalf("externalTrafficPolicy Local, quiet for 5s: path %s, want kernel", path())
	}

	if err := m.Sync(ctx, webNodePort(false)); err != nil {
		t.Fatal(err)
	}
	if path() != Kernel || port().KernelFromStart {
		t.Fatalf("policy Cluster: path %s, status %+v; want kernel, the Promoter's", path(), port())
	}
	quiet(3)
	if path() != Userspace {
		t.Fatalf("policy Cluster, quiet for 3s: path %s, want userspace", path())
	}
	rec.take()

	rec.fail = true
	if err := m.Sync(ctx, webNodePort(true)); err == nil {
		t.Fatal("Sync with the kernel path failing: no error")
	}
	if path() != Userspace {
		t.Fatalf("kernel path failing: path %s, want userspace", path())
	}
	rec.fail = false
	m.Step(ctx)
	if path() != Kernel {
		t.Fatalf("the Step after the kernel path works again: path %s, want kernel", path())
	}
	if got, want := caught(t, "retried", rec.take()), "[[true false] [true true] [false true]]"; fmtPaths(got) != want {
		t.Errorf("retried: [portal kernel] went %v, want %s", got, want)
	}
}
