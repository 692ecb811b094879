// Package nftables is svcproxy's nftables dataplane: kube-proxy's nftables mode.
//
// A Snapshot is rendered, by a pure function, into one transaction of nft commands
// for a table of svcproxy's own, `ip svcproxy`, applied with one `nft -f` run
// (sigs.k8s.io/knftables; a full sync's made in parts, table.go's fullParts,
// so that it is never held whole). Where iptables mode walks a chain with a rule per
// service port, this table looks a packet's destination up in verdict maps:
//
//	nat-prerouting -> services:
//	    ip daddr . meta l4proto . th dport vmap @service-ips        (ClusterIPs, externalIPs, LB IPs)
//	    fib daddr type local ... meta l4proto . th dport vmap @service-nodeports
//	-> service-<port>: numgen random spread, each rule a DNAT to one endpoint
//	   (with ClientIP affinity: -> endpoint-<port>__<endpoint>, which DNATs)
//	nat-postrouting -> masquerading (MASQUERADE what mark-for-masquerade marked,
//	   and hairpin traffic: source . destination in the hairpin set)
//
// A lookup in a map costs the same with one Service or 10,000, so the cost of a new
// connection does not grow with the number of Services. Ports without endpoints are
// REJECTed (or DROPped, for a Local policy without local endpoints) through the
// no-endpoint-services and no-endpoint-nodeports maps, LoadBalancer IPs with source
// ranges go through firewall-ips, and a ClusterIP's ports that no Service has are
// rejected (cluster-ips).
//
// Dataplane keeps the kernel in step with Snapshots: a partial sync writes only
// the chains, sets and map elements of changed service ports; a full sync (every
// FullSyncPeriod, an hour, after any failure, and when the check made every
// SyncPeriod finds the table deleted or flushed) writes the whole table and
// deletes chains that belong to nothing. Its sync (sync.go) reads from the top
// down: kernelsync's Ledger decides full or partial and remembers what was
// applied, shared with iptables mode; render (table.go, render.go, plan.go) says
// what the table's objects are; write applies them in one nft transaction
// (partial.go for a partial one); the Ledger records the result and cleans stale
// UDP flows. The lifecycle all kernel modes share (dataplane.Syncer) runs the
// syncs; the periodic full sync comes as two, the changes it carries first, as
// a partial sync, and the full one right after (kernelsync's
// Sync.ChangesFirst). The table outlives the process; a new Dataplane adopts it at its first
// sync (never before the first Snapshot), and Cleanup deletes it.
//
// A table is of one IP family (Config.Family), as kube-proxy's are: `ip
// svcproxy` from the Services' IPv4 addresses and endpoints, `ip6 svcproxy`
// from their IPv6 ones (ip6 expressions, ipv6_addr sets); a dual-stack node runs
// one Dataplane per family, each over its own table.
package nftables
