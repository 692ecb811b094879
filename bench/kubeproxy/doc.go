// Package kubeproxy measures svcproxy beside the program it replaces,
// kube-proxy v1.37.2, on the same API server, the same Services and the
// same machine, in one run: cold start, network programming latency, the
// periodic full sync, CPU and memory, and the data path.
//
// One kube-apiserver and etcd per size (internal/kapitest) hold the
// Services, each one TCP port, and their EndpointSlices as the
// EndpointSlice controller writes them (labels, the Service as owner,
// endpoint conditions, endpoints.kubernetes.io/last-change-trigger-time),
// and the node the proxies run as. The sizes are Services × endpoints:
// 1,000 × 10, 10,000 × 3, 5,000 × 50 (250,000 endpoints) and 40,000 × 3.
//
// Each run is one proxy in one mode (kube-proxy: iptables, nftables;
// svcproxy: those and socklb, hybrid), alone, in network namespaces made
// for the run and removed after it; a round runs every proxy once, in an
// order rotated from round to round, and a ratio is the mean of the rounds'
// ratios with its 95% interval:
//
//	client pod ---- node (the proxy; its rules) ---- backend
//	198.19.200.2    .200.1            .201.1         198.19.201.2; every
//	                127.0.0.1:6443: the API server   pod address (198.19.0.0/17)
//	                (relayed from the machine's      and Service address
//	                loopback by this process)        (198.18.0.0/16) is local
//
// The backend answers at every pod address on port 8080 and tells the
// client which address it reached (bench/tcpload); a Service address that
// no rule translates reaches it too, where nothing listens on port 80:
// refused at once. So a probe from the client sees a rule the moment it
// works. The client is this test binary again, in the client pod (and,
// for the socket LB, born in the cgroup svcproxy attaches to).
//
// A run: the proxy starts (kube-proxy with a KubeProxyConfiguration that
// keeps its health and metrics servers in the node's namespace and leaves
// the machine's conntrack sizing alone; svcproxy with the same addresses
// and periods on its command line); cold start is the time to the last
// Service answering a probe, and to /healthz 200. Then the data path: new
// connections/s and keep-alive requests/s to the first and the last
// Service, in slices alternating between them (hybrid first gets load on
// both, long enough to be promoted). Then 200 changes spread over more than
// one full-sync period (both proxies' shortened equally, FULL_SYNC): 50
// Services get an endpoint added and later removed, 50 are created and
// later deleted. Each change's latency runs from the API write to the
// first probe connection that sees it; beside it the proxy's own
// kubeproxy_network_programming_duration_seconds, and every full sync
// timed from kubeproxy_sync_full_proxy_rules_duration_seconds, which marks
// the changes that waited through one. CPU is the proxy's and its waited
// children's (iptables-restore, nft), memory the proxy's VmHWM and VmRSS
// and, sampled, its children's with it.
//
// Only `make bench-kubeproxy` runs it (root, an hour or more); `go test`
// runs the quick checks of its parts:
//
//	make bench-kubeproxy                                  # every size, 3 rounds
//	SIZES=1000x10 ROUNDS=5 make bench-kubeproxy           # one size
//	PROXIES='svcproxy nftables,kube-proxy nftables' SIZES=10000x3 make bench-kubeproxy
//
// Figures and how to read them: docs/benchmarks.md ("svcproxy beside
// kube-proxy"); every run so far, with what each found:
// docs/benchmarks/kubeproxy.md.
package kubeproxy
