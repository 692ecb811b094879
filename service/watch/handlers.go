package watch

import (
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// ServiceHandler is told about every change to a Service, as kube-proxy's
// pkg/proxy/config.ServiceHandler is. Calls come from the informer's goroutine,
// one at a time; a handler must return quickly and must not modify the objects.
type ServiceHandler interface {
	OnServiceAdd(svc *v1.Service)
	OnServiceUpdate(old, svc *v1.Service)
	OnServiceDelete(svc *v1.Service)
}

// EndpointSliceHandler is told about every change to an EndpointSlice.
type EndpointSliceHandler interface {
	OnEndpointSliceAdd(es *discoveryv1.EndpointSlice)
	OnEndpointSliceUpdate(old, es *discoveryv1.EndpointSlice)
	OnEndpointSliceDelete(es *discoveryv1.EndpointSlice)
}

// eventHandler adapts an informer's untyped callbacks to a typed handler: add,
// update, delete of one type T. A delete can carry a tombstone
// (cache.DeletedFinalStateUnknown) when the watch missed the deletion and a
// re-list found the object gone; the object inside it is the last one known.
func eventHandler[T any](add func(T), update func(old, cur T), del func(T)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				add(o)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			o, ok1 := oldObj.(T)
			n, ok2 := obj.(T)
			if ok1 && ok2 {
				update(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(T); ok {
				del(o)
			}
		},
	}
}

func serviceEvents(h ServiceHandler) cache.ResourceEventHandler {
	return eventHandler(h.OnServiceAdd, h.OnServiceUpdate, h.OnServiceDelete)
}

func endpointSliceEvents(h EndpointSliceHandler) cache.ResourceEventHandler {
	return eventHandler(h.OnEndpointSliceAdd, h.OnEndpointSliceUpdate, h.OnEndpointSliceDelete)
}

// changeTracker is the Watcher's handler for both kinds. It keeps no copy
// of the objects (the informers' listers have them); it only marks the state
// dirty, which wakes the coalescing loop, and counts changes, which tells a
// resync whether anything is new.
type changeTracker struct {
	dirty chan struct{} // capacity 1: a pending mark absorbs further ones
	gen   atomic.Uint64 // raised by every change
}

var (
	_ ServiceHandler       = (*changeTracker)(nil)
	_ EndpointSliceHandler = (*changeTracker)(nil)
)

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

func (c *changeTracker) OnServiceAdd(*v1.Service)         { c.changed() }
func (c *changeTracker) OnServiceUpdate(_, _ *v1.Service) { c.changed() }
func (c *changeTracker) OnServiceDelete(*v1.Service)      { c.changed() }
func (c *changeTracker) OnEndpointSliceAdd(*discoveryv1.EndpointSlice) {
	c.changed()
}
func (c *changeTracker) OnEndpointSliceUpdate(_, _ *discoveryv1.EndpointSlice) {
	c.changed()
}
func (c *changeTracker) OnEndpointSliceDelete(*discoveryv1.EndpointSlice) {
	c.changed()
}
