// Package watch is where Snapshots come from, and the only package of svcproxy
// that imports client-go.
//
// A Watcher runs client-go informers on Services, EndpointSlices and Endpoints.
// Their events reach small handler interfaces (ServiceHandler,
// EndpointSliceHandler, EndpointsHandler, the shape of kube-proxy's
// pkg/proxy/config) that only mark the state dirty; a coalescing loop then
// builds a new service.Snapshot from the informers' listers with service.Build,
// at most once per MinSyncPeriod and at least once per ResyncPeriod, and hands
// it to every subscriber.
//
// There are two sources and one path. With a kubeconfig (or in a pod) the
// informers list and watch a real API server. With a manifests file,
// LoadManifests parses it, the objects go into client-go's fake clientset, and
// the very same informers watch that; when the file changes (written in place,
// or replaced by a rename as editors, kubectl-style tools and ConfigMap volumes
// do) the difference is applied to the fake clientset as creates, updates and
// deletes. A file that does not parse is reported with file:line and the last
// good state stays in force.
package watch
