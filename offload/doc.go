// Package offload is the room of the kernel paths: each serves a Snapshot's
// service ports in the kernel, so that no byte of a connection passes through
// Go. Each is a dataplane.Interface of its own (a --mode), and a
// dataplane.KernelPath that hybrid mode can promote ports to:
//
//   - offload/iptables: DNAT chains rendered as iptables-restore text,
//     kube-proxy's iptables mode;
//   - offload/nftables: one table of verdict maps, kube-proxy's nftables mode;
//   - offload/ipvs: IPVS virtual servers reconciled with the Snapshot,
//     kube-proxy's ipvs mode;
//   - offload/socklb: the socket LB, eBPF programs on a cgroup's socket hooks
//     that rewrite connect() to a backend, with nftables beside it for every
//     packet they do not see.
//
// offload/kernelsync holds how a sync goes for the two that render rules
// (iptables and nftables): full or partial, stale UDP flows, the health
// record. The paths import dataplane and kernel/..., never each other's
// packages, nor userspace or hybrid; this package holds no code.
package offload
