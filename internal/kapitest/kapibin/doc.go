// Package kapibin builds the two programs a real API server needs, kube-apiserver
// and etcd, from the Go module proxy, and keeps them in a cache outside the
// repository so that only the first build on a machine pays for it.
//
// The versions live in two small Go modules under test/kapi (apiserver/ and
// etcd/, each with its own go.mod and go.sum, so svcproxy's go.mod stays clean);
// Build reads them there. The cache key is both versions plus a hash of those
// four files: pinning another version, or any dependency, builds anew.
//
// A cold build takes minutes and ~2.4 GB of memory to link kube-apiserver;
// a file lock lets many test processes ask at once while one of them builds.
// The package uses only the standard library, so `go run ./test/kapi` (what
// test/kapi/build.sh and the Makefile use) starts quickly.
package kapibin
