package watch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/svcproxy/svcproxy/service"
)

// newFakeWatcher runs a Watcher on a fake clientset holding objs.
func newFakeWatcher(t *testing.T, cfg Config) (*Watcher, *fake.Clientset, *logRecorder) {
	t.Helper()
	client := fake.NewSimpleClientset()
	logs := newLogRecorder()
	cfg.Logger = slog.New(logs)
	if cfg.MinSyncPeriod == 0 {
		cfg.MinSyncPeriod = 10 * time.Millisecond
	}
	if cfg.ResyncPeriod == 0 {
		cfg.ResyncPeriod = time.Hour // tests that want resyncs say so
	}
	w, err := newWatcher(cfg, fakeListWatchers(client))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return w, client, logs
}

// fakeListWatchers list and watch the fake clientset c.
func fakeListWatchers(c *fake.Clientset) *listWatchers {
	lw := func(list func(context.Context, metav1.ListOptions) (runtime.Object, error),
		watch func(context.Context, metav1.ListOptions) (apiwatch.Interface, error)) cache.ListerWatcher {
		return listThenWatch{&cache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: watch}}
	}
	return &listWatchers{
		services: lw(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Services("").List(ctx, o)
		}, c.CoreV1().Services("").Watch),
		slices: lw(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.DiscoveryV1().EndpointSlices("").List(ctx, o)
		}, c.DiscoveryV1().EndpointSlices("").Watch),
	}
}

// TestWatcherFollowsClient walks a Service and its EndpointSlice through
// create, update and delete, and checks each Snapshot on the way.
func TestWatcherFollowsClient(t *testing.T) {
	w, client, _ := newFakeWatcher(t, Config{})
	snaps := start(t, w)
	ctx := t.Context()
	svcs := client.CoreV1().Services("default")
	slices := client.DiscoveryV1().EndpointSlices("default")

	await(t, snaps, "nothing", is(""))

	steps := []struct {
		name   string
		change func() error
		want   string
	}{{
		name: "create service",
		change: func() error {
			_, err := svcs.Create(ctx, testService("web", "198.18.0.10", 80), metav1.CreateOptions{})
			return err
		},
		want: "default/web:http 198.18.0.10:80 -> ",
	}, {
		name: "create slice",
		change: func() error {
			_, err := slices.Create(ctx, testSlice("web-1", "web", "198.19.0.1", "198.19.0.2"), metav1.CreateOptions{})
			return err
		},
		want: "default/web:http 198.18.0.10:80 -> 198.19.0.1:8080,198.19.0.2:8080",
	}, {
		name: "second slice",
		change: func() error {
			_, err := slices.Create(ctx, testSlice("web-2", "web", "198.19.0.3"), metav1.CreateOptions{})
			return err
		},
		want: "default/web:http 198.18.0.10:80 -> 198.19.0.1:8080,198.19.0.2:8080,198.19.0.3:8080",
	}, {
		name: "update service port",
		change: func() error {
			_, err := svcs.Update(ctx, testService("web", "198.18.0.10", 8000), metav1.UpdateOptions{})
			return err
		},
		want: "default/web:http 198.18.0.10:8000 -> 198.19.0.1:8080,198.19.0.2:8080,198.19.0.3:8080",
	}, {
		name: "update slice",
		change: func() error {
			_, err := slices.Update(ctx, testSlice("web-1", "web", "198.19.0.9"), metav1.UpdateOptions{})
			return err
		},
		want: "default/web:http 198.18.0.10:8000 -> 198.19.0.3:8080,198.19.0.9:8080",
	}, {
		name:   "delete slice",
		change: func() error { return slices.Delete(ctx, "web-2", metav1.DeleteOptions{}) },
		want:   "default/web:http 198.18.0.10:8000 -> 198.19.0.9:8080",
	}, {
		name:   "delete service",
		change: func() error { return svcs.Delete(ctx, "web", metav1.DeleteOptions{}) },
		want:   "",
	}}
	for _, step := range steps {
		if err := step.change(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		got := await(t, snaps, step.want, is(step.want))
		if got != w.Latest() && describe(w.Latest()) != step.want {
			t.Errorf("%s: Latest() = %s", step.name, describe(w.Latest()))
		}
	}
}

// TestWatcherEndpoints: a Service without slices takes its endpoints from its
// v1.Endpoints object in a manifests file, where no controller mirrors them
// into slices; from the API server only EndpointSlices are read, as
// kube-proxy reads them (the mirroring controller makes slices of such
// Endpoints there).
func TestWatcherEndpoints(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		snaps, _, _ := newFileWatcher(t, filepath.Join(t.TempDir(), "endpoints.yaml"), endpointsYAML)
		await(t, snaps, "endpoints", is("default/db:pg 198.18.0.20:5432 -> 198.19.0.7:5432"))
	})
	t.Run("api", func(t *testing.T) {
		w, client, _ := newFakeWatcher(t, Config{})
		objs, err := LoadManifests("endpoints.yaml", []byte(endpointsYAML))
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs { // before Run: the first Snapshot has both
			if err := client.Tracker().Add(obj); err != nil {
				t.Fatal(err)
			}
		}
		snaps := start(t, w)
		if got, want := describe(<-snaps), "default/db:pg 198.18.0.20:5432 -> "; got != want {
			t.Errorf("first Snapshot: %q, want %q (v1 Endpoints are not read from the API)", got, want)
		}
	})
}

const endpointsYAML = `
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: 198.18.0.20
  ports: [{name: pg, port: 5432}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: db}
subsets:
- addresses: [{ip: 198.19.0.7}]
  ports: [{name: pg, port: 5432}]
`

// TestWatcherCoalesces makes many changes inside one MinSyncPeriod and checks
// that they arrive as a few Snapshots, not one per change.
func TestWatcherCoalesces(t *testing.T) {
	const minSync = 500 * time.Millisecond
	const changes = 100
	w, client, _ := newFakeWatcher(t, Config{MinSyncPeriod: minSync})

	snaps := start(t, w)
	await(t, snaps, "nothing", is(""))
	before := w.syncs.Load()

	began := time.Now()
	for i := range changes {
		svc := testService(fmt.Sprintf("svc-%d", i), fmt.Sprintf("198.18.1.%d", i), 80)
		if _, err := client.CoreV1().Services("default").Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	await(t, snaps, "every service", func(s *service.Snapshot) bool { return s.Len() == changes })
	n := int(w.syncs.Load() - before)
	// At most one Snapshot per MinSyncPeriod since the first, however long
	// the changes took on a busy machine.
	bound := 1 + int(time.Since(began)/minSync)
	if n > bound || n >= changes {
		t.Errorf("%d changes made %d Snapshots; want at most %d", changes, n, bound)
	}
	t.Logf("%d changes -> %d Snapshots", changes, n)
}

// TestWatcherWaitsForApplied: with WaitForApplied, no Snapshot comes while
// the subscriber applies the last one, however many changes arrive and
// however many MinSyncPeriods pass; after Applied, the next comes no sooner
// than MinSyncPeriod later, with every change up to then.
func TestWatcherWaitsForApplied(t *testing.T) {
	const minSync = 50 * time.Millisecond
	w, client, _ := newFakeWatcher(t, Config{MinSyncPeriod: minSync, WaitForApplied: true})
	snaps := start(t, w)
	await(t, snaps, "nothing", is(""))
	w.Applied() // the first sync is done

	create := func(i int) {
		t.Helper()
		svc := testService(fmt.Sprintf("svc-%d", i), fmt.Sprintf("198.18.1.%d", i), 80)
		if _, err := client.CoreV1().Services("default").Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(0)
	await(t, snaps, "svc-0", func(s *service.Snapshot) bool { return s.Len() == 1 })
	published, gen := w.syncs.Load(), w.tracker.gen.Load()
	// The subscriber is applying svc-0's Snapshot: ten more changes over
	// six MinSyncPeriods publish nothing.
	for i := 1; i <= 10; i++ {
		create(i)
		time.Sleep(minSync * 6 / 10)
	}
	for w.tracker.gen.Load()-gen < 10 { // every event in the caches, however slow
		time.Sleep(minSync / 10)
	}
	if n := w.syncs.Load() - published; n != 0 {
		t.Fatalf("%d Snapshots published before Applied, want none", n)
	}
	done := time.Now()
	w.Applied()
	await(t, snaps, "the ten", func(s *service.Snapshot) bool { return s.Len() == 11 })
	if waited := time.Since(done); waited < minSync {
		t.Errorf("next Snapshot %v after Applied, want at least MinSyncPeriod (%v)", waited, minSync)
	}
	if n := w.syncs.Load() - published; n != 1 {
		t.Errorf("the ten changes came in %d Snapshots, want one", n)
	}
}

// TestWatcherAppliedSince: after a full sync the subscriber counts
// MinSyncPeriod from when that sync was asked for. With a period of an hour
// counted from an hour ago, the changes held through the sync come at once.
func TestWatcherAppliedSince(t *testing.T) {
	w, client, _ := newFakeWatcher(t, Config{MinSyncPeriod: time.Hour, WaitForApplied: true})
	snaps := start(t, w)
	await(t, snaps, "nothing", is(""))
	asked := time.Now().Add(-time.Hour)
	gen := w.tracker.gen.Load()
	svc := testService("web", "198.18.1.1", 80)
	if _, err := client.CoreV1().Services("default").Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for w.tracker.gen.Load() == gen { // in the caches, held: the sync is not applied yet
		time.Sleep(time.Millisecond)
	}
	w.AppliedSince(asked)
	await(t, snaps, "web", func(s *service.Snapshot) bool { return s.Len() == 1 })
}

// TestWatcherResyncs: without changes, a Snapshot still comes every ResyncPeriod.
func TestWatcherResyncs(t *testing.T) {
	w, _, _ := newFakeWatcher(t, Config{ResyncPeriod: 20 * time.Millisecond})
	snaps := start(t, w)
	for range 3 {
		await(t, snaps, "anything", func(*service.Snapshot) bool { return true })
	}
}

// TestWatcherReportsErrorsOnce: an invalid Service is logged when it appears,
// not on every resync, and its repair is logged too.
func TestWatcherReportsErrorsOnce(t *testing.T) {
	w, client, logs := newFakeWatcher(t, Config{ResyncPeriod: 20 * time.Millisecond})
	snaps := start(t, w)
	ctx := t.Context()
	bad := testService("web", "999.1.1.1", 80)
	bad.Spec.ClusterIPs = nil
	if _, err := client.CoreV1().Services("default").Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, snaps, "the error", func(s *service.Snapshot) bool { return len(s.Errors()) == 1 })
	for range 5 { // five resyncs with the same error
		await(t, snaps, "the error", func(s *service.Snapshot) bool { return len(s.Errors()) == 1 })
	}
	const msg = `service default/web: spec.clusterIP "999.1.1.1": not an IP address`
	if n := logs.count("object skipped", msg); n != 1 {
		t.Errorf("error logged %d times, want once", n)
	}
	if _, err := client.CoreV1().Services("default").Update(ctx, testService("web", "198.18.0.10", 80), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, snaps, "web", is("default/web:http 198.18.0.10:80 -> "))
	logs.waitFor(t, "object error resolved", msg)
}

// TestWatcherLateSubscriber gets the current Snapshot at once.
func TestWatcherLateSubscriber(t *testing.T) {
	w, _, _ := newFakeWatcher(t, Config{})
	first := start(t, w)
	s := await(t, first, "nothing", is(""))
	select {
	case got := <-w.Subscribe():
		if got != s && got != w.Latest() {
			t.Errorf("late subscriber got %p, want the latest", got)
		}
	case <-time.After(deadline):
		t.Fatal("late subscriber got nothing")
	}
}

func TestNewConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"resync below min", Config{MinSyncPeriod: time.Second, ResyncPeriod: time.Millisecond}, "resync period"},
		{"missing kubeconfig", Config{Kubeconfig: "/nonexistent/kubeconfig"}, "kubeconfig /nonexistent/kubeconfig"},
		{"missing file", Config{ServicesFile: "/nonexistent/services.yaml"}, "services file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestRunStopsBeforeSync: Run returns when ctx ends even if the informers
// never synced (an API server that is not there).
func TestRunStopsBeforeSync(t *testing.T) {
	w, err := New(Config{Kubeconfig: writeKubeconfig(t, "https://127.0.0.1:1"), Logger: slog.New(newLogRecorder())})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run: %v", err)
	}
	if w.Latest() != nil {
		t.Error("a Snapshot without a sync")
	}
}

// writeKubeconfig writes a kubeconfig for server with a bearer token.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: test
  user: {token: secret}
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, server)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
