// Package service is the domain of svcproxy: Services as a node proxy sees them.
//
// The API server speaks in v1.Service, discovery/v1 EndpointSlice and v1.Endpoints
// objects; a proxy thinks in service ports ("default/web:http" over TCP) each with
// its virtual addresses and the endpoints behind it. Build turns the former into
// the latter, validating every object on the way: an invalid object is skipped with
// an error that names it and its field, and everything else still works.
//
// The result is a Snapshot: immutable, shared freely between goroutines, with O(1)
// lookups by port name and by ClusterIP:port. Everything downstream (the userspace
// proxier, the kernel offload, the cluster DNS) reads Snapshots and nothing else.
//
// This package does not import client-go; only the k8s.io/api types.
package service
