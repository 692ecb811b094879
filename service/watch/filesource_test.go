package watch

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// manifest renders Services named after ports: web80 is 198.18.0.1:80, and so on.
func manifest(ports ...int) string {
	var docs []string
	for i, p := range ports {
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: web%d\nspec:\n  clusterIP: 198.18.%d.%d\n  ports:\n  - {name: http, port: %d}\n",
			p, i/250, i%250+1, p))
	}
	return strings.Join(docs, "---\n")
}

// portsOf lists a Snapshot's service ports, "80 81".
func portsOf(s *service.Snapshot) string {
	var out []string
	for _, p := range s.Ports() {
		out = append(out, fmt.Sprint(p.Port))
	}
	return strings.Join(out, " ")
}

func hasPorts(want string) func(*service.Snapshot) bool {
	return func(s *service.Snapshot) bool { return portsOf(s) == want }
}

// newFileWatcher writes content to dir/services.yaml and runs a Watcher on it.
func newFileWatcher(t *testing.T, path, content string) (<-chan *service.Snapshot, *Watcher, *logRecorder) {
	t.Helper()
	if content != "" {
		writeFile(t, path, content)
	}
	logs := newLogRecorder()
	w, err := New(Config{ServicesFile: path, MinSyncPeriod: 10 * time.Millisecond,
		ResyncPeriod: 50 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return start(t, w), w, logs
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes content beside path and renames it over path, as editors
// and `kubectl`-style atomic writers do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestFileSourceReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	snaps, _, logs := newFileWatcher(t, path, manifest(80))
	await(t, snaps, "port 80", hasPorts("80"))

	writeFile(t, path, manifest(80, 81))
	await(t, snaps, "written in place", hasPorts("80 81"))

	replaceFile(t, path, manifest(81, 82))
	await(t, snaps, "replaced by rename", hasPorts("81 82"))

	// Broken: the second document's line 3 is line 12 of the file.
	broken := manifest(81) + "---\napiVersion: v1\nkind: Service\nmetadata: {name: x\n"
	writeFile(t, path, broken)
	msg := logs.waitFor(t, "does not load", path+":12:")
	t.Logf("logged: %s", msg)
	// The resyncs that follow still carry the last good state.
	for range 3 {
		s := await(t, snaps, "any", func(*service.Snapshot) bool { return true })
		if got := portsOf(s); got != "81 82" {
			t.Fatalf("after a broken file: ports %q, want the last good %q", got, "81 82")
		}
	}

	// Unsupported kinds are skipped with a message; the rest applies.
	writeFile(t, path, manifest(83)+"---\n"+deploymentYAML)
	await(t, snaps, "fixed file", hasPorts("83"))
	logs.waitFor(t, "document skipped", path+":10: apps/v1 Deployment default/web: unsupported kind")

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	logs.waitFor(t, "unreadable, keeping the last good state")
	writeFile(t, path, manifest(84))
	await(t, snaps, "recreated file", hasPorts("84"))
}

// TestFileSourceConfigMapSwap mimics a ConfigMap volume: the file is a
// symlink through "..data", and an update swaps "..data" to a new directory.
func TestFileSourceConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "services.yaml"), content)
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", manifest(80))
	path := filepath.Join(dir, "services.yaml")
	if err := os.Symlink("..data/services.yaml", path); err != nil {
		t.Fatal(err)
	}
	snaps, _, _ := newFileWatcher(t, path, "")
	await(t, snaps, "port 80", hasPorts("80"))

	version("..v2", manifest(90, 91))
	await(t, snaps, "the swapped version", hasPorts("90 91"))
}

// TestFileSourceLargeChange changes hundreds of objects at once; the
// Snapshot after it holds all of them.
func TestFileSourceLargeChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	snaps, _, _ := newFileWatcher(t, path, manifest(80))
	await(t, snaps, "port 80", hasPorts("80"))

	var ports []int
	var want []string
	for p := 1000; p < 1260; p++ {
		ports = append(ports, p)
		want = append(want, fmt.Sprint(p))
	}
	replaceFile(t, path, manifest(ports...))
	await(t, snaps, "260 services", hasPorts(strings.Join(want, " ")))
}

// TestFileSourceLogsBeforeHandover: "services file reloaded" is logged before
// the Watcher is woken to hand the new Snapshot over, never after. Whoever
// waits for a change to be applied reads the log for that line and then
// waits for a handover that follows it (the lab's WaitApplied); a handover
// stamped before the line would be taken for an older one, and the wait would
// last until the next resync.
func TestFileSourceLogsBeforeHandover(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	writeFile(t, path, manifest(80))
	logs := newLogRecorder()
	var wakes []int // the reloaded lines logged at each wake
	f, err := newFileSource(fileConfig{path: path, maxBytes: 1 << 20}, slog.New(logs), func() {
		wakes = append(wakes, logs.count("services file reloaded"))
	})
	if err != nil {
		t.Fatal(err)
	}
	f.load([]byte(manifest(80, 81)))
	f.load([]byte(manifest(80, 81) + "\n")) // the same Services: no handover
	if want := []int{0, 1}; !slices.Equal(wakes, want) {
		t.Errorf("reloaded lines logged at each wake: %v, want %v (start-up, then after the first reload's line)", wakes, want)
	}
	if n := logs.count("services file reloaded"); n != 2 {
		t.Errorf("%d reloaded lines, want 2", n)
	}
}

func TestNewRejectsBrokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	writeFile(t, path, manifest(80)+"---\nkind: [\n")
	_, err := New(Config{ServicesFile: path})
	if err == nil || !strings.Contains(err.Error(), path+":10:") {
		t.Errorf("New: %v, want an error naming %s:10", err, path)
	}
}
