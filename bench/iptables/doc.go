// Package iptables measures svcproxy's iptables dataplane on the real kernel, inside
// throwaway network namespaces (it needs root; without it every benchmark skips):
//
//   - sync: a full sync and a one-service change at 1,000 and 10,000 service ports
//     with 3 endpoints each, applied with iptables-restore, next to the naive way
//     (one `iptables` command per rule) at 1,000;
//   - data path: new connections per second and bulk throughput from a client
//     namespace through a node namespace to 3 backends: direct to a backend, through
//     a hand-written DNAT rule set, and through svcproxy's rules (with 1 and with
//     10,000 services loaded).
//
// Run it with `make bench`, or:
//
//	go test -run '^$' -bench . -benchtime 10x ./bench/iptables/
//
// Figures and how to read them: docs/benchmarks.md ("The iptables dataplane").
package iptables
