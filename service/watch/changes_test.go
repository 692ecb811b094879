package watch

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/service"
)

// changesAre is true for a Snapshot that includes exactly these counts.
func changesAre(services, endpoints uint64) func(*service.Snapshot) bool {
	return func(s *service.Snapshot) bool {
		gotS, gotE := s.Changes()
		return gotS == services && gotE == endpoints
	}
}

// The Watcher counts every informer event of Services and
// of EndpointSlices, as kube-proxy's ServiceChangeTracker.Update and
// EndpointsChangeTracker.EndpointSliceUpdate count them (the initial list's
// adds among them), and each Snapshot carries the counts it includes.
func TestWatcherCountsChanges(t *testing.T) {
	w, client, _ := newFakeWatcher(t, Config{})
	ctx := t.Context()
	svcs := client.CoreV1().Services("default")
	slices := client.DiscoveryV1().EndpointSlices("default")
	if _, err := svcs.Create(ctx, testService("db", "198.18.0.20", 5432), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	snaps := start(t, w)
	await(t, snaps, "the listed Service counted", changesAre(1, 0))

	steps := []struct {
		name                string
		change              func() error
		services, endpoints uint64 // cumulative
	}{
		{"add service", func() error {
			_, err := svcs.Create(ctx, testService("web", "198.18.0.10", 80), metav1.CreateOptions{})
			return err
		}, 2, 0},
		{"add slice", func() error {
			_, err := slices.Create(ctx, testSlice("web-1", "web", "198.19.0.1"), metav1.CreateOptions{})
			return err
		}, 2, 1},
		{"update slice", func() error {
			_, err := slices.Update(ctx, testSlice("web-1", "web", "198.19.0.1", "198.19.0.2"), metav1.UpdateOptions{})
			return err
		}, 2, 2},
		{"update service", func() error {
			_, err := svcs.Update(ctx, testService("web", "198.18.0.10", 8080), metav1.UpdateOptions{})
			return err
		}, 3, 2},
		{"delete slice", func() error { return slices.Delete(ctx, "web-1", metav1.DeleteOptions{}) }, 3, 3},
		{"delete service", func() error { return svcs.Delete(ctx, "web", metav1.DeleteOptions{}) }, 4, 3},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		await(t, snaps, fmt.Sprintf("%s: changes %d/%d", s.name, s.services, s.endpoints), changesAre(s.services, s.endpoints))
		if gotS, gotE := w.Changes(); gotS != s.services || gotE != s.endpoints {
			t.Errorf("%s: Watcher.Changes() = %d, %d, want %d, %d", s.name, gotS, gotE, s.services, s.endpoints)
		}
	}
}

// A manifests file has no events: each load counts the Services whose spec
// changed (added and removed ones too) and those whose endpoints changed.
func TestFileSourceCountsChanges(t *testing.T) {
	const slice2 = "\n- addresses: [198.19.0.2]\n"
	moved := strings.Replace(manifest(80), "198.18.0.1\n", "198.18.0.99\n", 1) // web80, another clusterIP
	path := filepath.Join(t.TempDir(), "services.yaml")
	writeFile(t, path, manifest(80))
	f, err := newFileSource(fileConfig{path: path, maxBytes: 1 << 20}, slog.New(newLogRecorder()), func() {})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name                string
		file                string
		services, endpoints uint64 // cumulative
	}{
		{"start", "", 1, 0},
		{"add a service with endpoints", manifest(80) + "---\n" + webWithSlice, 2, 1},
		{"add an endpoint", manifest(80) + "---\n" + webWithSlice[:len(webWithSlice)-1] + slice2, 2, 2},
		{"same content", manifest(80) + "---\n" + webWithSlice[:len(webWithSlice)-1] + slice2, 2, 2},
		{"change a service's clusterIP", moved + "---\n" + webWithSlice[:len(webWithSlice)-1] + slice2, 3, 2},
		{"remove the service with endpoints", moved, 4, 3},
	}
	for _, s := range steps {
		if s.file != "" {
			f.load([]byte(s.file))
		}
		if gotS, gotE := f.snapshot().Changes(); gotS != s.services || gotE != s.endpoints {
			t.Errorf("%s: Snapshot.Changes() = %d, %d, want %d, %d", s.name, gotS, gotE, s.services, s.endpoints)
		}
		if gotS, gotE := f.counts.load(); gotS != s.services || gotE != s.endpoints {
			t.Errorf("%s: counts = %d, %d, want %d, %d", s.name, gotS, gotE, s.services, s.endpoints)
		}
	}
}
