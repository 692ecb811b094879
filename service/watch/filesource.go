package watch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// DefaultMaxFileBytes bounds a manifests file (Config.MaxFileBytes). A JSON
// List of 20,000 Services with their EndpointSlices is about 12 MB; parsing
// costs several times the file's size in memory while it lasts.
const DefaultMaxFileBytes = 32 << 20

// ErrFileTooLarge is wrapped by the error about a manifests file larger than
// Config.MaxFileBytes. At startup New returns it; on a reload it is logged and
// the last good state stays in force.
var ErrFileTooLarge = errors.New("larger than the limit (--services-max-bytes)")

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

// kinds are the stores of a file source, by the kind of object they hold.
var (
	serviceKind   = v1.SchemeGroupVersion.WithKind("Service")
	endpointsKind = v1.SchemeGroupVersion.WithKind("Endpoints")
	sliceKind     = discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice")
)

// fileSource keeps one store per kind in step with a manifests file. The
// stores are client-go's thread-safe indexers, read through the same listers
// as an informer's cache, and they are the only copy of the objects (a fake
// clientset under informers would hold each twice). A reload applies the
// difference under mu, which the Watcher also takes to list, so a Snapshot
// never sees half a reload.
type fileSource struct {
	path     string
	maxBytes int64
	log      *slog.Logger
	changed  func() // wakes the Watcher's loop
	now      func() time.Time

	mu     sync.Mutex
	stores map[schema.GroupVersionKind]cache.Indexer

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

// newFileSource reads and loads the file; it must load.
func newFileSource(path string, maxBytes int64, log *slog.Logger, changed func()) (*fileSource, error) {
	f := &fileSource{path: path, maxBytes: maxBytes, log: log, changed: changed, now: time.Now, stores: newStores()}
	data, st, err := f.readSettled()
	if err != nil {
		return nil, fmt.Errorf("services file: %w", err)
	}
	objs, err := LoadManifests(path, data)
	if !onlyUnsupported(err) {
		return nil, err
	}
	f.logSkipped(err)
	f.last = st
	f.apply(objs)
	return f, nil
}

// newStores returns an empty store per kind, indexed as informers index.
func newStores() map[schema.GroupVersionKind]cache.Indexer {
	stores := make(map[schema.GroupVersionKind]cache.Indexer)
	for _, k := range []schema.GroupVersionKind{serviceKind, endpointsKind, sliceKind} {
		stores[k] = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	return stores
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
		return nil, st, 0, fmt.Errorf("%s: %d bytes: %w (%d bytes)", f.path, st.size, ErrFileTooLarge, f.maxBytes)
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
	data, err = io.ReadAll(io.LimitReader(file, f.maxBytes+1))
	if err != nil {
		return nil, st, 0, err
	}
	if int64(len(data)) > f.maxBytes {
		return nil, st, 0, fmt.Errorf("%s: %w (%d bytes)", f.path, ErrFileTooLarge, f.maxBytes)
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

// listers read the stores; lock is held by the Watcher while it lists.
func (f *fileSource) listers() listers {
	return listers{
		lock:  &f.mu,
		svc:   corelisters.NewServiceLister(f.stores[serviceKind]),
		slice: discoverylisters.NewEndpointSliceLister(f.stores[sliceKind]),
		ep:    corelisters.NewEndpointsLister(f.stores[endpointsKind]),
	}
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
	had := len(f.stores[serviceKind].ListKeys())
	n := f.apply(objs)
	services := len(f.stores[serviceKind].ListKeys())
	if had > 0 && services == 0 {
		// An empty file is valid, and is applied; but it is far more often a
		// truncated write or a mistake than an intent.
		f.log.Error("services file reloaded WITHOUT ANY SERVICE: every Service was removed", "file", f.path, "removed", had)
	}
	f.log.Info("services file reloaded", "file", f.path, "objects", len(objs), "services", services, "changes", n)
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

// apply makes the stores hold exactly objs, under mu, writing only what
// changed, and wakes the Watcher if anything did. It returns the number of
// objects added, updated or deleted.
func (f *fileSource) apply(objs []runtime.Object) int {
	want := make(map[schema.GroupVersionKind]map[string]runtime.Object)
	for _, obj := range objs {
		gvk := obj.GetObjectKind().GroupVersionKind()
		if f.stores[gvk] == nil {
			continue // LoadManifests returns only the supported kinds
		}
		_, _ = trim(obj)
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			continue // cannot happen: LoadManifests checked the name
		}
		if want[gvk] == nil {
			want[gvk] = make(map[string]runtime.Object)
		}
		want[gvk][key] = obj
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for gvk, store := range f.stores {
		for _, key := range store.ListKeys() {
			if _, keep := want[gvk][key]; !keep {
				if old, exists, _ := store.GetByKey(key); exists {
					_ = store.Delete(old)
					n++
				}
			}
		}
		for key, obj := range want[gvk] {
			old, exists, _ := store.GetByKey(key)
			if exists && equality.Semantic.DeepEqual(old, obj) {
				continue
			}
			_ = store.Add(obj) // Add replaces an object with the same key
			n++
		}
	}
	if n > 0 {
		f.changed()
	}
	return n
}
