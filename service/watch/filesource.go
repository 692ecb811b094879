package watch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/svcproxy/svcproxy/service"
)

// DefaultMaxFileBytes bounds a manifests file (Config.MaxFileBytes). A JSON
// List of 20,000 Services with their EndpointSlices is about 12 MB; parsing
// costs several times the file's size in memory while it lasts.
const DefaultMaxFileBytes = 32 << 20

// ErrFileTooLarge is wrapped by the error about a manifests file larger than
// Config.MaxFileBytes. At startup New returns it; on a reload it is logged and
// the last good state stays in force. The error names the file, its size and
// the bound, not a flag: the package does not know which flag set the bound
// (both commands call it --services-max-bytes).
var ErrFileTooLarge = errors.New("larger than the limit")

const (
	// settle is how long the file's size and modification time must hold
	// still before it is read: an editor's save or a `cp` is several writes,
	// and a file read between two of them is half a file.
	settle = 300 * time.Millisecond
	// pollPeriod: the file is also looked at this often, in case a change
	// event was lost (inotify's queue overflowed, or no watch could be added).
	pollPeriod = 5 * time.Second
	// retryPeriod: a failed read (a missing file, EMFILE) is tried again this
	// often, so that service resumes within seconds once the cause is gone.
	retryPeriod = time.Second
)

// fileSource keeps a Snapshot in step with a manifests file. It holds no
// objects: each version of the file is parsed, built into a Snapshot with
// service.Build, and its objects are dropped. Informers must keep every
// object to follow a watch; a file is read whole every time, so the parsed
// objects have no later use: at 20,000 Services, dropping them halved
// clusterdns's heap (86 to 44 MB). A Watcher takes the latest Snapshot under mu.
type fileSource struct {
	fileConfig
	log     *slog.Logger
	changed func() // wakes the Watcher's loop
	now     func() time.Time

	mu   sync.Mutex
	snap *service.Snapshot // of the file as last applied

	// Owned by the goroutine of run.
	last    fileStamp // the file as last read, applied or refused
	pending fileStamp // a stamp waiting to hold still (modified in the future)
	readErr string    // the read error last logged, logged once while it lasts
}

// fileStamp identifies one version of the file.
type fileStamp struct {
	size  int64
	mtime time.Time
	sum   [sha256.Size]byte // of the content; zero until read
}

func (s fileStamp) sameStat(o fileStamp) bool { return s.size == o.size && s.mtime.Equal(o.mtime) }

// fileConfig is what a fileSource is told by the Watcher's Config.
type fileConfig struct {
	path     string
	maxBytes int64
	sel      selection
	// counts are the Watcher's change counts, which each load raises by
	// what changed; nil: counts of the file source's own (tests).
	counts *changeCounts
}

// newFileSource reads and loads the file; it must load.
func newFileSource(cfg fileConfig, log *slog.Logger, changed func()) (*fileSource, error) {
	if cfg.counts == nil {
		cfg.counts = &changeCounts{}
	}
	f := &fileSource{fileConfig: cfg, log: log, changed: changed, now: time.Now}
	data, st, err := f.readSettled()
	if err != nil {
		return nil, fmt.Errorf("services file: %w", err)
	}
	objs, err := LoadManifests(f.path, data)
	if !onlyUnsupported(err) {
		return nil, err
	}
	f.logSkipped(err)
	f.last = st
	if f.put(objs) > 0 {
		f.changed()
	}
	return f, nil
}

// readSettled reads the file at startup, waiting (a little) for a file that
// is being written to hold still.
func (f *fileSource) readSettled() ([]byte, fileStamp, error) {
	for attempt := 0; ; attempt++ {
		data, st, wait, err := f.read()
		if err != nil || wait == 0 || attempt == 20 {
			return data, st, err
		}
		time.Sleep(wait)
	}
}

// read reads the file once it has settled. wait > 0 says it has not: ask
// again after wait.
func (f *fileSource) read() (data []byte, st fileStamp, wait time.Duration, err error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return nil, st, 0, err
	}
	st = fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if st.size > f.maxBytes {
		return nil, st, 0, fmt.Errorf("%s: %d bytes: %w of %d bytes", f.path, st.size, ErrFileTooLarge, f.maxBytes)
	}
	if age := f.now().Sub(st.mtime); age < settle {
		if age >= 0 {
			return nil, st, settle - age, nil
		}
		// Modified "in the future" (a clock step): wait until it holds still.
		if !st.sameStat(f.pending) {
			f.pending = st
			return nil, st, settle, nil
		}
	}
	file, err := os.Open(f.path)
	if err != nil {
		return nil, st, 0, err
	}
	defer file.Close()
	// Read into a buffer of the size stat gave (ReadFrom wants MinRead bytes
	// free before its last read, the one that finds the end): io.ReadAll
	// starts small and doubles, which for a file of 12 MB was a tenth of
	// clusterdns's startup in copies and page faults.
	buf := bytes.NewBuffer(make([]byte, 0, st.size+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(file, f.maxBytes+1)); err != nil {
		return nil, st, 0, err
	}
	data = buf.Bytes()
	if int64(len(data)) > f.maxBytes {
		return nil, st, 0, fmt.Errorf("%s: %w of %d bytes", f.path, ErrFileTooLarge, f.maxBytes)
	}
	after, err := file.Stat()
	if err != nil {
		return nil, st, 0, err
	}
	if after.Size() != int64(len(data)) || !after.ModTime().Equal(st.mtime) {
		return nil, st, settle, nil // written while we read: not settled
	}
	st.sum = sha256.Sum256(data)
	return data, st, 0, nil
}

// snapshot returns the Snapshot of the file as last applied.
func (f *fileSource) snapshot() *service.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap
}

// runTo is the file source's goroutine, owned by Watcher.Run and stopped by
// ctx: it runs run and sends its result to done.
func (f *fileSource) runTo(ctx context.Context, ready chan<- struct{}, done chan<- error) {
	done <- f.run(ctx, ready)
}

// run watches the file's directory until ctx is done. Watching the directory,
// not the file, is what catches a replace-by-rename: the file's inode changes,
// and a watch on the old inode would go silent. ConfigMap volumes swap a
// "..data" symlink instead, which shows up as events on "..*" names. ready is
// closed once the watch is in place. Besides the events, the file is looked at
// every pollPeriod, and a failed read is retried every retryPeriod.
func (f *fileSource) run(ctx context.Context, ready chan<- struct{}) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("services file %s: watch: %w", f.path, err)
	}
	defer fw.Close()
	names := map[string]bool{filepath.Base(f.path): true}
	dirs := []string{filepath.Dir(f.path)}
	// A path that is a symlink to a file elsewhere: watch there too.
	if target, err := filepath.EvalSymlinks(f.path); err == nil && filepath.Dir(target) != dirs[0] {
		names[filepath.Base(target)] = true
		dirs = append(dirs, filepath.Dir(target))
	}
	for _, d := range dirs {
		if err := fw.Add(d); err != nil {
			return fmt.Errorf("services file %s: watch %s: %w", f.path, d, err)
		}
	}
	close(ready)

	timer := time.NewTimer(0) // catch a change made between New and now
	defer timer.Stop()
	poll := time.NewTicker(pollPeriod)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			base := filepath.Base(ev.Name)
			if names[base] || strings.HasPrefix(base, "..") {
				timer.Reset(settle)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			f.log.Warn("services file watch", "file", f.path, "err", err)
		case <-poll.C:
			if again := f.check(); again > 0 {
				timer.Reset(again)
			}
		case <-timer.C:
			if again := f.check(); again > 0 {
				timer.Reset(again)
			}
		}
	}
}

// check reads the file if it changed since it was last read and has settled,
// and applies it when it loads. It returns when to check again (0: at the next
// event or poll).
func (f *fileSource) check() time.Duration {
	fi, err := os.Stat(f.path)
	if err == nil && f.last.sameStat(fileStamp{size: fi.Size(), mtime: fi.ModTime()}) && f.readErr == "" {
		return 0 // unchanged since it was last read
	}
	data, st, wait, err := f.read()
	switch {
	case errors.Is(err, ErrFileTooLarge):
		if !f.last.sameStat(st) {
			f.log.Error("services file refused, keeping the last good state", "err", err)
		}
		f.last, f.readErr = st, ""
		return 0
	case err != nil:
		if msg := err.Error(); msg != f.readErr {
			f.log.Error("services file unreadable, keeping the last good state; retrying", "file", f.path, "err", err)
			f.readErr = msg
		}
		return retryPeriod
	case wait > 0:
		return wait
	}
	if f.readErr != "" {
		f.log.Info("services file readable again", "file", f.path)
		f.readErr = ""
	}
	prev := f.last
	f.last = st
	if st.sum == prev.sum {
		return 0 // touched, same content
	}
	f.load(data)
	return 0
}

// load parses data and, if it loads, applies it.
func (f *fileSource) load(data []byte) {
	objs, err := LoadManifests(f.path, data)
	if !onlyUnsupported(err) {
		for _, e := range unjoin(err) {
			f.log.Error("services file does not load, keeping the last good state", "err", e)
		}
		return
	}
	f.logSkipped(err)
	had := f.snapshot().Len()
	n := f.put(objs)
	services := f.snapshot().Len()
	if had > 0 && services == 0 {
		// An empty file is valid, and is applied; but it is far more often a
		// truncated write or a mistake than an intent.
		f.log.Error("services file reloaded WITHOUT ANY SERVICE: every Service was removed", "file", f.path, "removed", had)
	}
	f.log.Info("services file reloaded", "file", f.path, "objects", len(objs), "services", services, "changes", n)
	if n > 0 {
		f.changed() // after the line: see put
	}
}

func (f *fileSource) logSkipped(err error) {
	for _, e := range unjoin(err) {
		f.log.Warn("services file: document skipped", "err", e)
	}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// put builds the Snapshot of objs and, if it differs from the one in force,
// puts it in force. It returns the number of Services added, changed or
// removed, plus one if the skipped objects changed (their errors are reported
// from the Snapshot): when it is not 0, the caller wakes the Watcher
// (f.changed), which hands the Snapshot over. objs are not kept.
//
// load logs "services file reloaded" between the two, so the line is always
// written before the Snapshot it announces is handed over: whoever reads the
// log (the lab waits for a sync after that line) never sees a handover that
// precedes it.
func (f *fileSource) put(objs []runtime.Object) int {
	snap := build(objs, f.sel)

	f.mu.Lock()
	defer f.mu.Unlock()
	n, services, endpoints := changes(f.snap, snap)
	if f.snap != nil && n == 0 {
		return 0 // an equal Snapshot: subscribers keep the one they have
	}
	// Counted and stamped before snap is shared: only this goroutine counts.
	f.counts.services.Add(services)
	f.counts.endpoints.Add(endpoints)
	f.snap = snap.With(service.WithChanges(f.counts.load()))
	return max(n, 1) // the first Snapshot is news even when it is empty
}

// changes counts the Services that differ between two Snapshots (old may be
// nil), plus one if their validation errors differ, plus one if this node's
// Node differs, plus one if the namespaces or the pods' addresses differ: n. Of the Services that differ, it also counts those whose
// spec differs (added and removed ones among them) and those whose endpoints
// differ: the file's Service and endpoint changes, as the informers' events
// would count them had each changed object been written once.
func changes(old, cur *service.Snapshot) (n int, services, endpoints uint64) {
	if old == nil {
		old = service.NewSnapshot(nil, nil)
	}
	count := func(was, svc *service.Service) {
		n++
		if was == nil || svc == nil || !reflect.DeepEqual(specOf(was), specOf(svc)) {
			services++
		}
		if !reflect.DeepEqual(sliceData(was), sliceData(svc)) {
			endpoints++
		}
	}
	for _, svc := range cur.Services() {
		if was, ok := old.Service(svc.NamespacedName); !ok {
			count(nil, svc)
		} else if !reflect.DeepEqual(was, svc) {
			count(was, svc)
		}
	}
	for _, svc := range old.Services() {
		if _, ok := cur.Service(svc.NamespacedName); !ok {
			count(svc, nil)
		}
	}
	if !slices.EqualFunc(old.Errors(), cur.Errors(), func(a, b error) bool { return a.Error() == b.Error() }) {
		n++
	}
	if !reflect.DeepEqual(old.Node(), cur.Node()) {
		n++
	}
	if !reflect.DeepEqual(old.Namespaces(), cur.Namespaces()) || !reflect.DeepEqual(old.PodIPs(), cur.PodIPs()) {
		n++
	}
	return n, services, endpoints
}

// specOf is svc without what its EndpointSlices gave it.
func specOf(svc *service.Service) service.Service {
	v := *svc
	v.Endpoints, v.Triggers = nil, nil
	v.Ports = make([]*service.Port, len(svc.Ports))
	for i, p := range svc.Ports {
		np := *p
		np.Service, np.Endpoints = nil, nil
		v.Ports[i] = &np
	}
	return v
}

// sliceData is what svc's EndpointSlices gave it; nil for no Service.
func sliceData(svc *service.Service) []any {
	if svc == nil {
		return nil
	}
	var out []any
	if len(svc.Endpoints) > 0 || len(svc.Triggers) > 0 {
		out = append(out, svc.Endpoints, svc.Triggers)
	}
	for _, p := range svc.Ports {
		if len(p.Endpoints) > 0 {
			out = append(out, p.Name, p.Endpoints)
		}
	}
	return out
}
