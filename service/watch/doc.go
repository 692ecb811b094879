// Package watch is where Snapshots come from, and the only package of svcproxy
// that imports client-go.
//
// A Watcher runs client-go informers on Services and EndpointSlices, as
// kube-proxy does (v1 Endpoints of the API server are not read: the
// EndpointSlice mirroring controller turns them into slices), and, when
// Config.NodeName names this node, on that one Node, whose labels and
// deletion state every Snapshot carries (service.Snapshot.Node). Their events
// only mark the state dirty; a coalescing loop then joins the informers'
// caches into a new service.Snapshot, at most once per MinSyncPeriod and at
// least once per ResyncPeriod, and hands it to every subscriber.
//
// There are two sources and one Snapshot type. With a kubeconfig (or in a
// pod) the informers list and watch a real API server; their transform
// converts each object as it arrives (service.ConvertService,
// service.ConvertSlice) and the caches keep only that, not the API objects,
// so a Snapshot is service.Join of the caches. Their first LIST, most of
// the start-up in a large cluster, is decoded item by item and converted as
// it is decoded (list.go), without client-go's list of API objects. With a
// manifests file, LoadManifests parses it and service.Build makes the
// Snapshot at once; the objects are not kept, since the file is read whole
// again when it changes (written in place, or replaced by a rename as
// editors, kubectl-style tools and ConfigMap volumes do), once its size and
// mtime have settled. A version whose Snapshot equals the one in
// force changes nothing. A file that does not parse, is larger than the limit,
// or cannot be read is reported and the last good state stays in force; a
// failed read is retried.
//
// A resync in which no object changed publishes the latest Snapshot again
// (the same pointer), so that subscribers can skip rebuilding what they
// derived from it.
package watch
