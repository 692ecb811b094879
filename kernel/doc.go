// Package kernel is the only room of svcproxy that talks to the Linux kernel.
//
// Each subpackage puts one kernel facility behind a small Interface whose calls take a
// context.Context, with a real implementation and a stateful Fake in the same package
// (the shape of sigs.k8s.io/knftables):
//
//   - iptables: netfilter rules, applied as iptables-restore text in one transaction per
//     table, read back with iptables-save, plus a packet tracer over a Fake rule set;
//   - nftables: one nf_tables table of svcproxy's own, written in transactions of nft
//     commands (sigs.k8s.io/knftables), plus a packet tracer over a Fake table;
//   - ipvs: IPVS virtual and real servers;
//   - ipset: IP sets, so that IPVS mode's masquerade rules do not grow with the
//     number of Services;
//   - link: interfaces and addresses (the dummy interface that holds service IPs);
//   - conntrack: deleting stale connection-tracking entries;
//   - socklb: eBPF programs on a cgroup's socket hooks and their maps, which
//     rewrite a Service's address to a backend's at connect() and sendmsg()
//     (no packet NAT) and back at recvmsg() and getpeername(), plus a tracer
//     over a Fake of the maps.
//
// The two packet tracers (over the iptables and nftables Fakes) walk their rules
// their own way, and share, in kernel/internal/tracing, how a trace goes through
// random choices (Packet.Pick, TraceAll) and how it prints.
//
// The real implementations act on the network namespace of the calling OS thread. Tests
// and the lab start svcproxy inside a namespace they created, so it never touches the
// machine's own.
package kernel
