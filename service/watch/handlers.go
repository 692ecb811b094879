package watch

import (
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
)

// changeTracker is the Watcher's event handler for both informers. It keeps
// no copy of the objects (the informers' caches have them); it only marks the
// state dirty, which wakes the coalescing loop, and counts changes, which
// tells a resync whether anything is new. A delete may carry a tombstone
// (cache.DeletedFinalStateUnknown) when the watch missed the deletion and a
// re-list found the object gone: a change all the same.
type changeTracker struct {
	dirty chan struct{} // capacity 1: a pending mark absorbs further ones
	gen   atomic.Uint64 // raised by every change
}

var _ cache.ResourceEventHandler = (*changeTracker)(nil)

func newChangeTracker() *changeTracker {
	return &changeTracker{dirty: make(chan struct{}, 1)}
}

func (c *changeTracker) changed() {
	c.gen.Add(1)
	select {
	case c.dirty <- struct{}{}:
	default: // already dirty
	}
}

func (c *changeTracker) OnAdd(any, bool)   { c.changed() }
func (c *changeTracker) OnUpdate(_, _ any) { c.changed() }
func (c *changeTracker) OnDelete(any)      { c.changed() }
