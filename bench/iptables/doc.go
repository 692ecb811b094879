// Package iptables measures svcproxy's iptables dataplane on the real kernel, inside
// throwaway network namespaces (it needs root; without it every benchmark skips):
//
//   - sync: a full sync and a one-service change at 1,000 and 10,000 service ports
//     with 3 endpoints each, applied with iptables-restore, next to the naive way
//     (one `iptables` command per rule) at 1,000; nf_tables at 10,000 ports only with
//     SVCP_BENCH_NFT_10K=1 (tens of minutes);
//   - data path: new connections per second and bulk throughput from a client
//     namespace through a node namespace to 3 backends: direct to a backend, through
//     a hand-written DNAT rule set, and through svcproxy's rules (with 1 and with
//     10,000 services loaded). Each of these rows has its own ports, so no row meets
//     another's TIME_WAIT sockets, and the conn rows report the client's SYN
//     retransmissions (syn-retrans), which must be 0 for the figure to mean anything.
//
// Run it with `make bench`, or:
//
//	go test -run '^$' -bench . -benchtime 10x ./bench/iptables/
//
// With -report FILE (after -args; best absolute, as go test runs in this
// directory) a run also writes its figures and the side-by-side ratios of
// what it measured (comparisons, in report_test.go) as the JSON report that
// bench/plot draws (bench/report):
//
//	go test -run '^$' -bench Naive -benchtime 1x ./bench/iptables/ -args -report /tmp/naive.json
//
// Figures and how to read them: docs/benchmarks.md ("The iptables dataplane").
package iptables
