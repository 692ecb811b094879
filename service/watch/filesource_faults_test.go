package watch

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// webWithSlice is a Service and the EndpointSlice that gives it endpoints.
const webWithSlice = `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 198.18.0.10
  ports: [{name: http, port: 80}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [198.19.0.1]
`

// endpointsOf is "web=1" for a Snapshot whose Service web has one endpoint.
func endpointsOf(s *service.Snapshot) string {
	var out []string
	for _, p := range s.Ports() {
		out = append(out, p.Name.Name+"="+string(rune('0'+len(p.Endpoints))))
	}
	return strings.Join(out, " ")
}

// TestFileSourceWaitsForSettledFile: a file whose last write is more recent
// than the settle time is not read yet, whatever events say: a writer in the
// middle of a file (the Service written, its slice not yet) is not applied.
// The clock is the file source's own, so the test does not depend on timing.
func TestFileSourceWaitsForSettledFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	writeFile(t, path, manifest(80))
	f, err := newFileSource(fileConfig{path: path, maxBytes: DefaultMaxFileBytes}, slog.New(newLogRecorder()), func() {})
	if err != nil {
		t.Fatal(err)
	}
	half := webWithSlice[:strings.Index(webWithSlice, "---")]
	writeFile(t, path, half)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f.now = func() time.Time { return fi.ModTime().Add(settle / 10) }
	if wait := f.check(); wait <= 0 || wait > settle {
		t.Errorf("check of a file written just now: wait %v, want a wait up to %v", wait, settle)
	}
	if svcs := f.snapshot().Services(); len(svcs) != 1 || svcs[0].NamespacedName.String() != "default/web80" {
		t.Fatalf("a file still being written was applied: services %v", svcs)
	}

	// The writer finishes; once the file has held still, all of it applies.
	writeFile(t, path, webWithSlice)
	if fi, err = os.Stat(path); err != nil {
		t.Fatal(err)
	}
	f.now = func() time.Time { return fi.ModTime().Add(settle) }
	if wait := f.check(); wait != 0 {
		t.Fatalf("settled file not read: wait %v", wait)
	}
	if p := f.snapshot().Ports(); len(p) != 1 || len(p[0].Endpoints) == 0 {
		t.Errorf("ports %v after the whole file, want one with the slice's endpoints", p)
	}
}

// TestFileSourceRemovesEverythingLoudly: an empty file is applied (it may be
// meant), but never silently.
func TestFileSourceRemovesEverythingLoudly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	snaps, _, logs := newFileWatcher(t, path, manifest(80, 81))
	await(t, snaps, "two services", hasPorts("80 81"))
	writeFile(t, path, "# nothing here\n")
	await(t, snaps, "no services", hasPorts(""))
	logs.waitFor(t, "ERROR", "WITHOUT ANY SERVICE", "removed=2")
}

// TestFileSourceSizeLimit: a file over the limit is refused with a named
// error at startup, and on a reload the last good state stays.
func TestFileSourceSizeLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	small, big := manifest(80), manifest(80, 81, 82, 83)
	limit := int64(len(small) + 10)
	writeFile(t, path, big)
	if _, err := New(Config{ServicesFile: path, MaxFileBytes: limit}); !errors.Is(err, ErrFileTooLarge) {
		t.Fatalf("New with a file over the limit: %v, want ErrFileTooLarge", err)
	}

	writeFile(t, path, small)
	logs := newLogRecorder()
	w, err := New(Config{ServicesFile: path, MaxFileBytes: limit, MinSyncPeriod: 10 * time.Millisecond,
		ResyncPeriod: 50 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	snaps := start(t, w)
	await(t, snaps, "port 80", hasPorts("80"))
	replaceFile(t, path, big) // atomic: a truncated file read under load is a valid empty one
	logs.waitFor(t, "refused, keeping the last good state", "larger than the limit")
	for range 3 {
		if s := await(t, snaps, "any", func(*service.Snapshot) bool { return true }); portsOf(s) != "80" {
			t.Fatalf("after a refused file: ports %q, want 80", portsOf(s))
		}
	}
	replaceFile(t, path, manifest(90))
	await(t, snaps, "a file within the limit again", hasPorts("90"))
}

// TestFileSourceRetriesFailedRead: when reading the file fails for a reason
// that changes nothing on disk (the process is out of file descriptors:
// EMFILE), the read is retried, and service resumes within seconds of the
// descriptors coming back. Before, the failed read waited for the next change
// event, which never came.
func TestFileSourceRetriesFailedRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	snaps, _, logs := newFileWatcher(t, path, manifest(80))
	await(t, snaps, "port 80", hasPorts("80"))

	// Open the file for writing first: with no descriptor left, neither the
	// test nor the file source could open it.
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// open(2) returns the lowest free descriptor, and fails with EMFILE when
	// that is at or above the limit: the limit becomes the lowest free one.
	probe, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	lowestFree := probe.Fd()
	probe.Close()
	restore := func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}
	exhausted := old
	exhausted.Cur = uint64(lowestFree)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &exhausted); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restore)
	if _, err := out.WriteString(manifest(81)); err != nil {
		restore()
		t.Fatal(err)
	}
	// out stays open: closing it would free a descriptor.
	logs.waitFor(t, "unreadable", "too many open files")
	restore()
	out.Close()
	await(t, snaps, "the file read again once descriptors are back", hasPorts("81"))
	logs.waitFor(t, "readable again")
}
