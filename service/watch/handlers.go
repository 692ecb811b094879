package watch

import (
	"reflect"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"

	"github.com/svcproxy/svcproxy/service"
)

// changeTracker is the Watcher's event handler for both informers. It keeps
// no copy of the objects (the informers' caches have them); it only marks the
// state dirty, which wakes the coalescing loop, and counts changes, which
// tells a resync whether anything is new. A delete may carry a tombstone
// (cache.DeletedFinalStateUnknown) when the watch missed the deletion and a
// re-list found the object gone: a change all the same.
type changeTracker struct {
	dirty  chan struct{} // capacity 1: a pending mark absorbs further ones
	gen    atomic.Uint64 // raised by every change
	counts changeCounts  // by kind, for kube-proxy's change metrics
}

// changeCounts are the Service and EndpointSlice changes a source has recorded
// since it started, cumulative: kube-proxy's
// kubeproxy_sync_proxy_rules_{service,endpoint}_changes_total, which its
// ServiceChangeTracker.Update and EndpointsChangeTracker.EndpointSliceUpdate
// (k8s.io/kubernetes v1.37.2 pkg/proxy) raise for every informer add, update
// and delete. A Snapshot carries the counts it includes (Snapshot.Changes).
type changeCounts struct {
	services, endpoints atomic.Uint64
}

func (c *changeCounts) load() (services, endpoints uint64) {
	return c.services.Load(), c.endpoints.Load()
}

// counted is the handler of one informer, Services' or EndpointSlices': each
// event is a change of the tracker's, counted in n.
type counted struct {
	*changeTracker
	n *atomic.Uint64
}

func (c counted) OnAdd(any, bool)   { c.n.Add(1); c.changed() }
func (c counted) OnUpdate(_, _ any) { c.n.Add(1); c.changed() }
func (c counted) OnDelete(any)      { c.n.Add(1); c.changed() }

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

// nodeTracker is the event handler of the Node informer, and keeps what
// a Snapshot holds of this node's Node (service.Node: labels, deletion, the
// autoscaler's taint). It passes a change on to the changeTracker only when
// that changed: the kubelet rewrites its Node's status on its own schedule
// (conditions, images, heartbeats when leases are off), and each such update
// would otherwise rebuild the Snapshot of every Service for nothing.
// kube-proxy filters the same way: its NodeTopologyConfig (k8s.io/kubernetes
// v1.37.2 pkg/proxy/config/config.go, handleNodeEvent) tells the proxier of a
// Node update only when the zone label changed.
//
// A Node that is deleted stays, marked Deleting: it went away, which is what
// a deletionTimestamp announces, and the health check keeps answering that
// the node is going (kube-proxy's NodeManager.OnNodeDelete exits instead;
// its topology keeps the last labels, as here).
type nodeTracker struct {
	changes *changeTracker

	mu   sync.Mutex
	node *service.Node // nil until the Node is seen
}

var _ cache.ResourceEventHandler = (*nodeTracker)(nil)

func (n *nodeTracker) OnAdd(obj any, _ bool) { n.seen(obj) }
func (n *nodeTracker) OnUpdate(_, obj any)   { n.seen(obj) }

func (n *nodeTracker) OnDelete(any) {
	n.mu.Lock()
	if n.node == nil || n.node.Deleting {
		n.mu.Unlock()
		return
	}
	gone := *n.node
	gone.Deleting = true
	n.node = &gone
	n.mu.Unlock()
	n.changes.changed()
}

func (n *nodeTracker) seen(obj any) {
	c, ok := obj.(*cachedNode)
	if !ok {
		return // the transform made every Node a cachedNode
	}
	n.mu.Lock()
	same := reflect.DeepEqual(n.node, c.obj)
	n.node = c.obj
	n.mu.Unlock()
	if !same {
		n.changes.changed()
	}
}

// get returns the Node as last seen, nil before it is. The Node is never
// modified once stored, so Snapshots may share it.
func (n *nodeTracker) get() *service.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.node
}

// podTracker is the event handler of the Pod informer: a pod's status
// changes often (conditions, container states) and the Snapshot holds only
// its address, so an update is a change only when that is.
type podTracker struct{ changes *changeTracker }

var _ cache.ResourceEventHandler = podTracker{}

func (p podTracker) OnAdd(any, bool) { p.changes.changed() }
func (p podTracker) OnDelete(any)    { p.changes.changed() }

func (p podTracker) OnUpdate(old, cur any) {
	o, ok1 := old.(*cachedPod)
	c, ok2 := cur.(*cachedPod)
	if !ok1 || !ok2 || o.ip != c.ip || o.has != c.has {
		p.changes.changed()
	}
}

// namespaceTracker is the event handler of the Namespace informer: a
// Snapshot holds namespaces' names only, so only an add or a delete is a
// change (an update of labels or status is not).
type namespaceTracker struct{ changes *changeTracker }

var _ cache.ResourceEventHandler = namespaceTracker{}

func (n namespaceTracker) OnAdd(any, bool)   { n.changes.changed() }
func (n namespaceTracker) OnDelete(any)      { n.changes.changed() }
func (n namespaceTracker) OnUpdate(_, _ any) {}
