package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svcproxy/svcproxy/service"
)

// Defaults of Config.
const (
	// DefaultMinSyncPeriod is kube-proxy's --iptables-min-sync-period default.
	DefaultMinSyncPeriod = time.Second
	// DefaultResyncPeriod is kube-proxy's --iptables-sync-period default.
	DefaultResyncPeriod = 30 * time.Second
)

// Config says where Services come from and how often Snapshots are made.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file. When both it and
	// ServicesFile are "", the in-cluster config (service account) is used.
	Kubeconfig string
	// Master, when not "", is the API server's URL, over the kubeconfig's
	// or the in-cluster one (kube-proxy's --master).
	Master string
	// QPS and Burst limit the client's requests as client-go's rest.Config
	// does; 0 is client-go's default (5 and 10, kube-proxy's too).
	QPS   float32
	Burst int
	// ServicesFile is a manifests file (see LoadManifests), watched for changes.
	ServicesFile string
	// MaxFileBytes bounds ServicesFile; a larger file is refused with
	// ErrFileTooLarge. 0 means DefaultMaxFileBytes.
	MaxFileBytes int64
	// MinSyncPeriod: at most one Snapshot per this interval, however many
	// changes arrive. 0 means DefaultMinSyncPeriod.
	MinSyncPeriod time.Duration
	// WaitForApplied paces Snapshots by their subscriber's syncs, as
	// kube-proxy's BoundedFrequencyRunner paces syncProxyRules: after a
	// Snapshot is published, the next one waits until the subscriber says
	// it has applied it (Applied) and MinSyncPeriod has passed since then,
	// so a sync that takes longer than MinSyncPeriod is not followed back
	// to back by the next, and the next is built when it starts, with every
	// change up to then. Without it, MinSyncPeriod counts from the last
	// build. The periodic resync is not held. Set it only when one
	// subscriber calls Applied after each Snapshot it takes (svcproxy's).
	WaitForApplied bool
	// ResyncPeriod: at least one Snapshot per this interval, even when nothing
	// changed. 0 means DefaultResyncPeriod.
	ResyncPeriod time.Duration

	// NodeName is this node's name. When it is not "", every Snapshot
	// carries that Node (service.Snapshot.Node): from the API server, a
	// watch of that one Node; from a manifests file, the v1 Node document of
	// that name. A change of what service.Node holds (labels, deletion, the
	// autoscaler's taint) publishes a new Snapshot. "" (clusterdns) watches
	// no Node, and Snapshot.Node is nil.
	NodeName string
	// ProxiedOnly leaves out what a service proxy does not serve, as
	// kube-proxy's informers do: Services labelled
	// service.kubernetes.io/service-proxy-name (whatever the value: they are
	// another proxy's), headless Services (clusterIP None) and
	// EndpointSlices labelled service.kubernetes.io/headless. An API server
	// selects them server-side (they never reach the process); a manifests
	// file is filtered by the same rules (select.go). svcproxy sets it;
	// clusterdns must not: it serves headless Services, and the names of
	// Services that another proxy carries.
	ProxiedOnly bool
	// Namespaces and Pods are what clusterdns reads beside Services, as
	// CoreDNS's kubernetes plugin does: every Snapshot carries the names of
	// the cluster's namespaces (service.Snapshot.Namespaces), and with Pods
	// the addresses of its pods (Snapshot.PodIPs, for "pods verified").
	// From the API server, an informer each; from a manifests file, its
	// Namespace and Pod documents (and every object's namespace). A pod's
	// update that keeps its address publishes nothing new.
	Namespaces, Pods bool

	// Logger receives parse errors of the file, validation errors of objects
	// (each distinct error once) and source events. nil means slog.Default().
	Logger *slog.Logger
}

// Watcher turns a stream of API object changes into a stream of Snapshots.
type Watcher struct {
	cfg     Config
	log     *slog.Logger
	api     listWatchers // the API server's, unless Config.ServicesFile
	file    *fileSource  // nil unless Config.ServicesFile
	source  string       // where objects come from, for the log
	tracker *changeTracker

	syncs atomic.Int64 // Snapshots published, for tests
	built atomic.Int64 // Snapshots built (a resync without changes builds none), for tests
	// applied is Applied's signal to the loop (Config.WaitForApplied):
	// when MinSyncPeriod counts from.
	applied chan time.Time

	// builtGen is the tracker's generation the latest Snapshot was built at:
	// while it is unchanged, no object changed and a resync republishes the
	// latest Snapshot instead of building an equal one. Owned by the loop.
	builtGen uint64

	mu     sync.Mutex
	subs   []chan *service.Snapshot
	latest *service.Snapshot

	// reported are the validation errors already logged, so that each is
	// logged once while it lasts rather than on every sync.
	reported map[string]bool
}

// New checks cfg and connects the source; nothing runs until Run. With a
// ServicesFile, the file is read now and must load (a wrong path or a broken
// file at startup is an error, not a silently empty proxy).
func New(cfg Config) (*Watcher, error) {
	return newWatcher(cfg, nil)
}

// newWatcher is New; lw, if not nil, is used instead of both sources (tests:
// a fake clientset's).
func newWatcher(cfg Config, lw *listWatchers) (*Watcher, error) {
	if cfg.MinSyncPeriod <= 0 {
		cfg.MinSyncPeriod = DefaultMinSyncPeriod
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	if cfg.ResyncPeriod < cfg.MinSyncPeriod {
		return nil, fmt.Errorf("resync period %v is shorter than min sync period %v", cfg.ResyncPeriod, cfg.MinSyncPeriod)
	}
	sel := selection{nodeName: cfg.NodeName, proxiedOnly: cfg.ProxiedOnly, namespaces: cfg.Namespaces, pods: cfg.Pods}
	w := &Watcher{cfg: cfg, log: cfg.Logger, tracker: newChangeTracker(), reported: make(map[string]bool),
		applied: make(chan time.Time, 1)}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.log = w.log.With("component", "watch")

	switch {
	case lw != nil:
		w.api, w.source = *lw, "client"
	case cfg.ServicesFile != "":
		if cfg.MaxFileBytes <= 0 {
			cfg.MaxFileBytes = DefaultMaxFileBytes
		}
		fs, err := newFileSource(fileConfig{path: cfg.ServicesFile, maxBytes: cfg.MaxFileBytes, sel: sel, counts: &w.tracker.counts},
			w.log, w.tracker.changed)
		if err != nil {
			return nil, err
		}
		w.file, w.source = fs, "file "+cfg.ServicesFile
	default:
		w.source = "in-cluster"
		if cfg.Kubeconfig != "" {
			w.source = "kubeconfig " + cfg.Kubeconfig
		}
		rc, err := restConfig(cfg.Kubeconfig, cfg.Master)
		if err != nil {
			return nil, err
		}
		rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
		rc.WarningHandler = &warningLogger{log: w.log, seen: make(map[string]bool)}
		if w.api, err = apiListWatchers(rc, sel); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Changes returns the Service and EndpointSlice changes the Watcher has
// recorded since it started (kube-proxy's *_changes_total): one per informer
// add, update or delete; from a manifests file, one per Service whose spec
// changed (added, removed) between two loads, and one per Service whose
// endpoints did. Safe for concurrent use; Snapshot.Changes is the part of it
// a Snapshot includes.
func (w *Watcher) Changes() (services, endpoints uint64) { return w.tracker.counts.load() }

// restConfig loads a kubeconfig file, or the in-cluster config when path is
// "", with master, when not "", as the server's URL (kube-proxy's
// createClient: clientcmd's BuildConfigFromFlags does both).
func restConfig(path, master string) (*rest.Config, error) {
	if path == "" && master == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (no --kubeconfig or --services given): %w", err)
		}
		rc.Dial = apiDialer.DialContext
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags(master, path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	rc.UserAgent = "svcproxy"
	// No rest.Config.Timeout: it would cut every watch short.
	rc.Dial = apiDialer.DialContext
	return rc, nil
}

// apiDialer connects to the API server: client-go's own dialer with a
// shorter connect timeout, 5 s instead of 30 s (the kernel has sent the SYN
// three times by then). A pod that reaches the API server through the
// Service kubernetes (clusterdns in a cluster) while the node's proxy has not
// yet written that Service's rules sends its SYN to the ClusterIP un-NATed,
// and the conntrack entry of that first SYN keeps every retransmission
// un-NATed too, whatever rules arrive meanwhile: that connect can only time
// out. The next one, from another source port, is NATed. On kind, where
// clusterdns and svcproxy start together, that wait was client-go's 30 s, and
// clusterdns's pods became Ready 36 s after they started.
var apiDialer = &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}

// Subscribe returns a channel that receives each new Snapshot. It has capacity
// one and the latest Snapshot wins: one that the subscriber has not taken yet is
// replaced by a newer one, so a slow subscriber skips states but never lags.
// Call it before Run; a later subscriber gets the latest Snapshot at once. The
// channel is never closed: stop on your own context.
func (w *Watcher) Subscribe() <-chan *service.Snapshot {
	ch := make(chan *service.Snapshot, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs = append(w.subs, ch)
	if w.latest != nil {
		ch <- w.latest
	}
	return ch
}

// Latest returns the last Snapshot published, or nil before the first sync.
func (w *Watcher) Latest() *service.Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

// Run starts the informers (and, for a file, its watcher), waits until they
// have listed everything, publishes the first Snapshot, and then publishes
// one whenever something changed (at most once per MinSyncPeriod) and at
// least once per ResyncPeriod. It blocks until ctx is done, then stops every
// goroutine it started and returns nil; it returns an error only when the
// file watcher cannot start. Run may be called once.
//
// When the API server goes away (a restart), the informers keep their last
// state and the reflectors retry with backoff; once it is back they list
// again and any difference arrives as ordinary events.
func (w *Watcher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if w.file != nil {
		return w.runFile(ctx)
	}

	// One informer per kind, each run by a goroutine of its own until ctx
	// is done; Run returns only after they have stopped.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs first: stops the informers that wg waits for
	newInformer := func(lw cache.ListerWatcher, example runtime.Object, h cache.ResourceEventHandler) (cache.SharedIndexInformer, cache.DoneChecker, error) {
		// No informer resync (0): our own ResyncPeriod rebuilds from the caches.
		inf := cache.NewSharedIndexInformer(lw, example, 0, noIndexes)
		// Cache converted objects, not API objects (transform.go).
		if err := inf.SetTransform(compact); err != nil {
			return nil, nil, fmt.Errorf("informer transform: %w", err)
		}
		r, err := inf.AddEventHandler(h)
		if err != nil {
			return nil, nil, fmt.Errorf("informer handler: %w", err)
		}
		wg.Go(func() { inf.RunWithContext(ctx) })
		return inf, r.HasSyncedChecker(), nil // synced: the handler has seen the initial list
	}
	// Services and EndpointSlices only, as kube-proxy and CoreDNS's
	// kubernetes plugin read them: in a cluster, the EndpointSlice
	// mirroring controller (kube-controller-manager, GA in Kubernetes 1.21)
	// makes slices of the v1 Endpoints of a Service without a selector, so
	// an informer on v1 Endpoints would cache a second copy of every
	// Service's endpoints and add nothing. A manifests file may still hold
	// v1 Endpoints: no controller mirrors a file.
	svcInf, svcSynced, err := newInformer(w.api.services, &v1.Service{}, counted{w.tracker, &w.tracker.counts.services})
	if err != nil {
		return err
	}
	sliceInf, sliceSynced, err := newInformer(w.api.slices, &discoveryv1.EndpointSlice{}, counted{w.tracker, &w.tracker.counts.endpoints})
	if err != nil {
		return err
	}
	synced := []cache.DoneChecker{svcSynced, sliceSynced}
	node := &nodeTracker{changes: w.tracker}
	if w.api.node != nil { // and this node's Node
		_, nodeSynced, err := newInformer(w.api.node, &v1.Node{}, node)
		if err != nil {
			return err
		}
		synced = append(synced, nodeSynced)
	}

	var nsInf, podInf cache.SharedIndexInformer
	if w.api.namespaces != nil {
		var synced1 cache.DoneChecker
		if nsInf, synced1, err = newInformer(w.api.namespaces, &v1.Namespace{}, namespaceTracker{w.tracker}); err != nil {
			return err
		}
		synced = append(synced, synced1)
	}
	if w.api.pods != nil {
		var synced1 cache.DoneChecker
		if podInf, synced1, err = newInformer(w.api.pods, &v1.Pod{}, podTracker{w.tracker}); err != nil {
			return err
		}
		synced = append(synced, synced1)
	}

	w.log.Info("waiting for informers to sync", "source", w.source)
	// WaitFor wakes when all are done; WaitForCacheSync would poll every 100 ms.
	if !cache.WaitFor(ctx, "", synced...) {
		return nil // ctx done before the first list
	}
	if w.api.node != nil && node.get() == nil {
		// kube-proxy logs it too (newNodeManager), and goes on without it.
		w.log.Warn("this node's Node object does not exist: Snapshots carry none until it does", "node", w.cfg.NodeName)
	}
	// One Joiner for every Snapshot the loop builds (one at a time): the
	// Services no change touched are shared with the last Snapshot.
	joiner := new(service.Joiner)
	w.loop(ctx, func() *service.Snapshot {
		// Read before the caches: the Snapshot holds at least these changes.
		services, endpoints := w.tracker.counts.load()
		opts := []service.SnapshotOption{service.WithNode(node.get()), service.WithChanges(services, endpoints)}
		if nsInf != nil {
			opts = append(opts, service.WithNamespaces(namespacesOf(nsInf.GetStore())))
		}
		if podInf != nil {
			opts = append(opts, service.WithPodIPs(podIPsOf(podInf.GetStore())))
		}
		return join(joiner, svcInf.GetStore(), sliceInf.GetStore(), opts...)
	})
	return nil
}

// join is the Snapshot of the informers' caches, which hold converted
// objects only (see compact), joined by j.
func join(j *service.Joiner, services, slices cache.Store, opts ...service.SnapshotOption) *service.Snapshot {
	items := services.List()
	svcs := make([]*service.ServiceObject, 0, len(items))
	for _, it := range items {
		if c, ok := it.(*cachedService); ok {
			svcs = append(svcs, c.obj)
		}
	}
	items = slices.List()
	ess := make([]*service.SliceObject, 0, len(items))
	for _, it := range items {
		if c, ok := it.(*cachedSlice); ok {
			ess = append(ess, c.obj)
		}
	}
	return j.Join(svcs, ess, nil, opts...)
}

// noIndexes: the caches are only ever listed whole (a Snapshot is built from
// every object), so they keep no index. The namespace index that informer
// factories add costs a set entry and a key string per object: 1.4 MB at 20,000
// Services and their EndpointSlices. A namespaced lister still works without
// it, by scanning.
var noIndexes = cache.Indexers{}

// runFile is Run for a manifests file: its first Snapshot is already built;
// the file source's goroutine builds those of later versions while the loop
// publishes.
func (w *Watcher) runFile(ctx context.Context) error {
	done := make(chan error, 1)
	ready := make(chan struct{})
	go w.file.runTo(ctx, ready, done)
	select {
	case <-ready:
	case err := <-done:
		return err
	}
	w.loop(ctx, w.file.snapshot)
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Applied tells the Watcher that its subscriber has applied the Snapshot it
// took last (with Config.WaitForApplied: the next one waits MinSyncPeriod
// from now). It does not block; without WaitForApplied it does nothing.
func (w *Watcher) Applied() { w.AppliedSince(time.Now()) }

// AppliedSince is Applied with MinSyncPeriod counted from since, not from
// now: for a sync that was, or waited for, a full sync of every rule
// (cmd/svcproxy). Such a sync comes once per full-sync period, so the one
// after it need not keep the period from its end; the changes held through
// it have waited as long as it took already.
func (w *Watcher) AppliedSince(since time.Time) {
	select {
	case w.applied <- since:
	default: // one already waiting says much the same
	}
}

// loop is the coalescing loop, kube-proxy's BoundedFrequencyRunner in a select:
// a change that arrives less than MinSyncPeriod after the last sync waits for
// the rest of that interval, and every change that arrives meanwhile rides
// along; the resync timer fires when nothing changed for ResyncPeriod. With
// Config.WaitForApplied the last sync is the subscriber's: a change that
// arrives while it applies a Snapshot waits for its Applied, then for
// MinSyncPeriod, as kube-proxy counts minSyncPeriod from the end of a run
// (runner.BoundedFrequencyRunner.Loop).
func (w *Watcher) loop(ctx context.Context, build func() *service.Snapshot) {
	w.sync(build)
	last := time.Now()
	busy := w.cfg.WaitForApplied // the subscriber is applying what was published
	waiting := false             // a change waits for its Applied
	resync := time.NewTimer(w.cfg.ResyncPeriod)
	defer resync.Stop()
	var held <-chan time.Time // non-nil while a change waits out MinSyncPeriod

	for {
		select {
		case <-ctx.Done():
			return
		case since := <-w.applied:
			if !busy {
				continue // a resync's, or one already counted
			}
			busy, last = false, since
			if waiting {
				waiting, held = false, time.After(time.Until(since.Add(w.cfg.MinSyncPeriod)))
			}
			continue
		case <-w.tracker.dirty:
			if held != nil {
				continue // already scheduled
			}
			if busy {
				waiting = true
				continue
			}
			if wait := time.Until(last.Add(w.cfg.MinSyncPeriod)); wait > 0 {
				held = time.After(wait)
				continue
			}
		case <-held:
		case <-resync.C:
		}
		// Take a pending mark first: whatever it announced is in the
		// listers now, so this sync covers it.
		select {
		case <-w.tracker.dirty:
		default:
		}
		held, waiting = nil, false
		w.sync(build)
		last = time.Now()
		busy = w.cfg.WaitForApplied
		resync.Reset(w.cfg.ResyncPeriod)
	}
}

// sync builds a Snapshot with build (nil: none this time) and publishes it.
// When no object changed since the latest Snapshot was built (a resync), it
// publishes that one again: subscribers can tell "nothing new" by the
// pointer, and nobody rebuilds an index for an equal Snapshot.
func (w *Watcher) sync(build func() *service.Snapshot) {
	// Read before building: a change that lands in the caches after this
	// raises the generation, so the next sync builds.
	gen := w.tracker.gen.Load()
	if latest := w.Latest(); latest != nil && gen == w.builtGen {
		w.publish(latest)
		return
	}
	snap := build()
	if snap == nil {
		return
	}
	w.builtGen = gen
	w.built.Add(1)
	w.reportErrors(snap.Errors())
	w.publish(snap)
}

// reportErrors logs each validation error once, when it first appears; one that
// goes away and comes back is logged again.
func (w *Watcher) reportErrors(errs []error) {
	now := make(map[string]bool, len(errs))
	for _, err := range errs {
		msg := err.Error()
		now[msg] = true
		if !w.reported[msg] {
			w.log.Warn("object skipped", "err", msg)
		}
	}
	for msg := range w.reported {
		if !now[msg] {
			w.log.Info("object error resolved", "err", msg)
		}
	}
	w.reported = now
}

// publish hands snap to every subscriber, replacing a Snapshot it has not
// taken yet. Only the loop sends, so after the drain the send cannot block.
func (w *Watcher) publish(snap *service.Snapshot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.latest = snap
	w.syncs.Add(1)
	for _, ch := range w.subs {
		select {
		case <-ch:
		default:
		}
		ch <- snap
	}
}
