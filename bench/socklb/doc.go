// Package socklb measures the socket LB's data path (kernel/socklb) on the
// real kernel against the two ends it sits between: a pod connecting
// straight to another pod (no Service, no translation: the physical limit)
// and the same Service through nftables DNAT (offload/nftables,
// kube-proxy's layout). The targets: new connections/s through the
// socket LB >= 0.98x direct, keep-alive requests/s >= 0.99x direct. A
// fourth row goes straight to the pod from the socket LB's cgroup: the
// hooks run and translate nothing, as for every connection a pod makes to
// something that is not a Service; against direct, the hooks' cost alone.
//
// The topology, all made by the benchmark and removed at its end, also when
// it fails:
//
//	              +-- node --------------+
//	client pod  --+  routes only         +--  server pod
//	198.19.20.2   +----------------------+    198.19.21.2 :8080 direct, :8081 socket LB,
//	                                                      :8083 direct from the LB's cgroup
//	198.19.22.2 --+-- nftables node -----+--  198.19.23.2 :8082 nftables
//	              |  DNAT 198.18.0.10:81 |
//
// Each pod has two links: the direct and socket-LB rows cross the node,
// which has no table (no connection tracking); Service addresses are routed
// through the nftables node, where offload/nftables's table stays for the
// whole run, so no row installs anything mid-run.
//
// Each row has a client of its own: this test binary run again as a child
// process in the client pod's network namespace, born (clone3
// CLONE_INTO_CGROUP) in one of two cgroups of a cgroup2 mount of the
// benchmark's own: "lb", where kernel/socklb's programs are attached (maps
// and links pinned in a bpffs the benchmark mounts, as svcproxy
// --socklb-pin-path does), for the socket-LB and direct-hooked rows, or
// "plain", with no program, for the direct and nftables rows. Its commands come on stdin (client_test.go).
//
// Each iteration is a round of -slices slices; in a slice, each row makes
// -conns new connections, then each row sends requests for -keepalive, in an
// order rotated from slice to slice. The rows alternate every few
// milliseconds, so the shared machine's load meets all of them alike; a
// round's ratio is over its sums, and the report gives the mean of the
// rounds' ratios with its 95% interval. The clients count their SYN
// retransmissions: a row with any measured 1-second timers too.
//
// The load is bench/tcpload's small Go loop, not wrk: wrk speaks HTTP,
// would need an HTTP server in the pod, and has no mode for a new
// connection per request short of "Connection: close" (the server then
// closes first and its TIME_WAIT sockets meet the client's reused ports);
// the loop does exactly connect, one 64-byte request and answer, close, and
// runs as one process whose cgroup is known, taking commands between slices.
//
// Only `make bench` runs the measurement (root); without -bench, `go test`
// runs the cheap checks of the statistics and the report:
//
//	go test -run '^$' -bench DataPath -benchtime 30x ./bench/socklb/ -args -report $PWD/docs/benchmarks/socklb-datapath.json
//
// Figures and how to read them: docs/benchmarks.md ("Socket LB: the data path").
package socklb
