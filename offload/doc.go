// Package offload decides which service ports leave the userspace proxy for a kernel
// dataplane, and holds those dataplanes: offload/iptables (DNAT chains, kube-proxy's
// iptables mode), offload/nftables (verdict maps, kube-proxy's nftables mode) and
// offload/ipvs (virtual servers, kube-proxy's ipvs mode). offload/kernelsync holds how a
// sync goes (full or partial, stale UDP flows, the health record) for the two that
// render rules.
//
// The Promoter is the decision, with no I/O: it is fed each service port's cumulative
// count of new connections, sampled over time (the userspace Counters while a port is
// in userspace, a kernel counter once it is promoted), and it answers with Moves. A
// port is hot when every sampled interval for PromoteAfter had a new-connection rate
// of at least PromoteConnRate; it goes back to userspace after DemoteAfter of
// intervals below that rate (never, when DemoteAfter is 0). The caller carries a
// Move out (kernel path first, then remove the portal; or the reverse to demote: package
// dataplane/hybrid) and confirms it with Moved; until then the Promoter proposes it again.
//
// A Clock drives it, so tests step time by hand.
package offload
