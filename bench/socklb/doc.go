// Package socklb measures the socket LB's data path (kernel/socklb) on the
// real kernel against the two ends it sits between: a pod connecting
// straight to another pod (no Service, no translation: the physical limit)
// and the same Service through nftables DNAT (offload/nftables,
// kube-proxy's layout). Issue 31's targets: new connections/s through the
// socket LB >= 0.98x direct, keep-alive requests/s >= 0.99x direct.
//
// The topology, all made by the benchmark and removed at its end, also when
// it fails:
//
//	client pod 198.19.20.2 --veth-- [node] --veth-- 198.19.21.2 server pod
//	(own netns, in a cgroup)       routes,          listens on :8080 direct,
//	                               nftables DNAT    :8081 socket LB, :8082 nftables
//
// The client is this test binary run again as a child process in the
// client pod's network namespace, born (clone3 CLONE_INTO_CGROUP) in one of
// two cgroups of a cgroup2 mount of the benchmark's own: "lb", where
// kernel/socklb's programs are attached (maps and links pinned in a bpffs
// the benchmark mounts, as svcproxy --socklb-pin-path does), or "plain",
// with no program, for the direct and nftables rows. The nftables table is
// in the node namespace only during the nftables row of each round, so the
// direct and socket-LB rows run with no connection tracking on the way.
//
// Each iteration is a round: the three rows one after another, their order
// rotated from round to round, so the shared machine's load meets all three
// alike; the report gives each ratio as the mean of the per-round ratios
// with its 95% interval. The client counts its TCP SYN retransmissions: a
// row with any measured 1-second timers too.
//
// The load is a small Go loop, not wrk: wrk speaks HTTP, would need an HTTP
// server in the pod, and has no mode for a new connection per request short
// of "Connection: close" (the server then closes first and its TIME_WAIT
// sockets meet the client's reused ports); the loop is 40 lines, does
// exactly connect, one 64-byte request and answer, close, and runs as one
// process whose cgroup is known.
//
// Only `make bench` runs the measurement (root); without -bench, `go test`
// runs the cheap checks of the statistics and the report:
//
//	go test -run '^$' -bench DataPath -benchtime 20x ./bench/socklb/ -args -report $PWD/docs/benchmarks/socklb-datapath.json
//
// Figures and how to read them: docs/benchmarks.md ("Socket LB: the data path").
package socklb
