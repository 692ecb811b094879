// Package dataplane is the one interface every proxy mode implements, and the
// lifecycle the kernel modes share.
//
// A mode is fed Snapshots and makes the node serve them: userspace (Go
// listeners behind REDIRECT portals, package userspace), iptables DNAT chains
// (offload/iptables), nftables verdict maps (offload/nftables), IPVS virtual
// servers (offload/ipvs), the eBPF socket LB with nftables beside it
// (offload/socklb), or hybrid, which composes the userspace portals and one
// kernel path (package hybrid, above the paths). This package is the contract
// below them all: it imports none of them. The program (cmd/svcproxy) only
// builds one from its flags and runs it:
//
//	dp.Sync(ctx, snap)  // for each Snapshot of service/watch
//	dp.Run(ctx)         // resyncs, retries, shutdown
//	dp.Healthy()        // /healthz
//	dp.Status()         // /status
//	registry.MustRegister(dp)  // /metrics: a prometheus.Collector
//
// A kernel mode that hybrid can use is a KernelPath: it carries only the ports
// its Config selects and reads its own connection counters.
//
// Syncer is the lifecycle of a kernel mode, written once: it serialises syncs,
// never syncs before the first Snapshot (kube-proxy's isInitialized), retries a
// failed sync with backoff, resyncs a period after the end of the last sync,
// and reports how far the rules lag the Snapshot (/healthz, and kube-proxy's
// kubeproxy_sync_proxy_rules_* metrics, which Record keeps).
package dataplane
