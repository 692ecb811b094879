package watch

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
)

// debounce is how long the file must be quiet before it is read again: an
// editor's save or a `cp` is several writes, and a reload per write would
// publish half a file.
const debounce = 100 * time.Millisecond

// applyBatch bounds the writes made to the fake clientset before waiting for
// the informers to catch up. The fake's watch channels hold 100 events and
// panic when full (k8s.io/apimachinery/pkg/watch.DefaultChanSize), so a file
// that changes 500 Services at once must not be written in one go.
const applyBatch = 50

// catchUpTimeout bounds that wait; the informers normally take microseconds.
const catchUpTimeout = 10 * time.Second

// resources maps each supported kind to the resource the fake clientset's
// tracker files it under.
var resources = map[schema.GroupVersionKind]schema.GroupVersionResource{
	v1.SchemeGroupVersion.WithKind("Service"):                v1.SchemeGroupVersion.WithResource("services"),
	v1.SchemeGroupVersion.WithKind("Endpoints"):              v1.SchemeGroupVersion.WithResource("endpoints"),
	discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"): discoveryv1.SchemeGroupVersion.WithResource("endpointslices"),
}

// fileSource keeps a fake clientset in step with a manifests file.
type fileSource struct {
	path   string
	log    *slog.Logger
	client *fake.Clientset
	events *counter // informer events seen, to pace writes

	data    []byte                       // the content last read
	applied map[objectKey]runtime.Object // what the fake clientset holds
}

// newFileSource reads and loads the file; it must load.
func newFileSource(path string, log *slog.Logger, events *counter) (*fileSource, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("services file: %w", err)
	}
	objs, err := LoadManifests(path, data)
	if !onlyUnsupported(err) {
		return nil, err
	}
	f := &fileSource{path: path, log: log, events: events, data: data}
	f.logSkipped(err)
	f.applied, _ = index(objs)
	f.client = fake.NewSimpleClientset(objs...)
	return f, nil
}

// index keys objects by kind, namespace and name.
func index(objs []runtime.Object) (map[objectKey]runtime.Object, error) {
	m := make(map[objectKey]runtime.Object, len(objs))
	for _, obj := range objs {
		k, err := keyOf(obj)
		if err != nil {
			return nil, err
		}
		m[k] = obj
	}
	return m, nil
}

func keyOf(obj runtime.Object) (objectKey, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if _, ok := resources[gvk]; !ok {
		return objectKey{}, fmt.Errorf("%T: %w", obj, ErrUnsupportedKind)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return objectKey{}, err
	}
	return objectKey{gvk: gvk, namespace: m.GetNamespace(), name: m.GetName()}, nil
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
// closed once the watch is in place.
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
	f.reload(ctx) // catch a change made between New and now

	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
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
				timer.Reset(debounce)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			f.log.Warn("services file watch", "file", f.path, "err", err)
		case <-timer.C:
			f.reload(ctx)
		}
	}
}

// reload reads the file and, if it loads, applies the difference.
func (f *fileSource) reload(ctx context.Context) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		f.log.Error("services file unreadable, keeping the last good state", "file", f.path, "err", err)
		f.data = nil // read it again once it is back, even unchanged
		return
	}
	if bytes.Equal(data, f.data) {
		return
	}
	f.data = data
	objs, err := LoadManifests(f.path, data)
	if !onlyUnsupported(err) {
		for _, e := range unjoin(err) {
			f.log.Error("services file does not load, keeping the last good state", "err", e)
		}
		return
	}
	f.logSkipped(err)
	n, err := f.apply(ctx, objs)
	if err != nil {
		f.log.Error("services file: applying changes", "file", f.path, "err", err)
		return
	}
	f.log.Info("services file reloaded", "file", f.path, "objects", len(objs), "changes", n)
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

// change is one write to the fake clientset: obj is nil for a delete.
type change struct {
	key objectKey
	obj runtime.Object
}

// diff lists the writes that turn have into want, in a stable order.
func diff(have, want map[objectKey]runtime.Object) []change {
	var out []change
	for k, obj := range want {
		if old, ok := have[k]; !ok || !equality.Semantic.DeepEqual(old, obj) {
			out = append(out, change{k, obj})
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			out = append(out, change{key: k})
		}
	}
	slices.SortFunc(out, func(a, b change) int {
		return cmp.Or(cmp.Compare(a.key.gvk.Kind, b.key.gvk.Kind),
			cmp.Compare(a.key.namespace, b.key.namespace), cmp.Compare(a.key.name, b.key.name))
	})
	return out
}

// apply writes the difference between the fake clientset and objs, in batches
// that the informers drain before the next one starts.
func (f *fileSource) apply(ctx context.Context, objs []runtime.Object) (int, error) {
	want, err := index(objs)
	if err != nil {
		return 0, err
	}
	changes := diff(f.applied, want)
	tracker := f.client.Tracker()
	for start := 0; start < len(changes); start += applyBatch {
		base := f.events.value()
		batch := changes[start:min(start+applyBatch, len(changes))]
		for _, c := range batch {
			gvr := resources[c.key.gvk]
			var err error
			switch _, exists := f.applied[c.key]; {
			case c.obj == nil:
				err = tracker.Delete(gvr, c.key.namespace, c.key.name)
			case exists:
				err = tracker.Update(gvr, c.obj, c.key.namespace)
			default:
				err = tracker.Create(gvr, c.obj, c.key.namespace)
			}
			if err != nil {
				return 0, fmt.Errorf("%s %s/%s: %w", c.key.gvk.Kind, c.key.namespace, c.key.name, err)
			}
			if c.obj == nil {
				delete(f.applied, c.key)
			} else {
				f.applied[c.key] = c.obj
			}
		}
		wctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
		err := f.events.waitFor(wctx, base+int64(len(batch)))
		cancel()
		if err != nil && ctx.Err() == nil {
			f.log.Warn("informers slow to catch up with the services file", "err", err)
		}
	}
	return len(changes), nil
}

// counter counts events and lets a goroutine wait for a count.
type counter struct {
	mu      sync.Mutex
	n       int64
	changed chan struct{} // closed and replaced on every increment
}

func newCounter() *counter { return &counter{changed: make(chan struct{})} }

func (c *counter) inc() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *counter) value() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// waitFor returns once the count reaches n, or ctx's error.
func (c *counter) waitFor(ctx context.Context, n int64) error {
	for {
		c.mu.Lock()
		cur, ch := c.n, c.changed
		c.mu.Unlock()
		if cur >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d events: %w", cur, n, ctx.Err())
		}
	}
}
