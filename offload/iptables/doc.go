// Package iptables is svcproxy's first kernel dataplane: kube-proxy's iptables mode.
//
// A Snapshot is rendered, by a pure function, into iptables-restore text: per service
// port a SVCP-SVC- chain that spreads new connections over SVCP-SEP- endpoint chains
// with the statistic match (probability 1/n, 1/(n-1), ... 1), each endpoint chain
// DNATing to its pod. The kernel then does the rest, connection by connection, and
// conntrack remembers each decision, so established connections never consult the
// rules again. The text is applied in one `iptables-restore --noflush` call.
//
// A packet from a pod to a ClusterIP walks:
//
//	nat PREROUTING -> SVCP-SERVICES -> SVCP-SVC-<hash> -> SVCP-SEP-<hash> (DNAT)
//	nat POSTROUTING -> SVCP-POSTROUTING (MASQUERADE if SVCP-MARK-MASQ marked it)
//
// NodePorts, externalIPs and LoadBalancer IPs enter through SVCP-EXT-<hash>, which
// marks for masquerade (externalTrafficPolicy: Cluster) or sends to the node-local
// endpoints of SVCP-SVL-<hash> keeping the client address (Local). A port without
// endpoints is rejected in the filter table (SVCP-SERVICES, SVCP-EXTERNAL-SERVICES).
//
// Dataplane keeps the kernel in step with Snapshots: a partial sync rewrites only
// the chains of changed service ports (kube-proxy KEP-3453), a full sync
// (FullSyncPeriod, an hour, after the last one ended, after any failure, and when
// the check made every SyncPeriod finds a hook from a built-in chain gone) rewrites
// everything and deletes chains that belong to nothing. Its sync (sync.go) reads
// from the top down: kernelsync's Ledger decides full or partial and remembers
// what was applied, shared with nftables mode; render (render.go, port.go) says
// what the rules are; write applies them in one restore; the Ledger records the
// result and cleans stale UDP flows. The lifecycle all kernel modes share
// (dataplane.Syncer) runs the syncs; the periodic full sync comes as two, the
// changes it carries first, as a partial sync, and the full one right after
// (kernelsync's Sync.ChangesFirst). The rules outlive the process; a new
// Dataplane adopts them at its first sync (never before the first Snapshot), and
// Cleanup removes them.
//
// A Dataplane serves one IP family (Config.Family): IPv4 rules for iptables, or IPv6
// rules for ip6tables, rendered by the same code from the same Snapshot with the
// family's addresses, endpoints, loopback range and masks; the other family's
// addresses are skipped. A dual-stack node runs one per family, as kube-proxy does
// (dataplane.Families), each applying its own transaction and cleaning its own
// conntrack table.
package iptables
