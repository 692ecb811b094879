// Package kernelsync is how a rule-writing kernel path keeps the kernel in
// step with the latest Snapshot, written once for offload/iptables and
// offload/nftables. The path owns its sync and reads from the top down; this
// package is what it calls, and it calls nothing of the path:
//
//	iptables.Dataplane.sync(ctx, snap)      // the path's Syncer applies each Snapshot
//	  Ledger.Begin                          // here: full or partial? what was applied?
//	  the path's check of its frame         // once per SyncPeriod: Ledger.Checked
//	  render -> RenderPorts -> renderPort   // the path's rules; reused ports unrendered
//	  write                                 // the path's one transaction
//	  Ledger.End                            // here: what the kernel holds, conntrack
//
// The Ledger holds the bookkeeping around the path's own rendering and writing:
//
//   - a sync is full (write everything, delete the port objects the kernel holds
//     that belong to nothing) at the first sync, after any failure, once
//     FullSyncPeriod (1h) has passed since the end of the last full one (not
//     in a large cluster, where the path says so: iptables above 1,000
//     endpoints, as kube-proxy's largeClusterMode), and when the periodic
//     check of the kernel fails; otherwise it is partial
//     (write only the ports that changed: kube-proxy KEP-3453), periodic
//     resyncs included, as in kube-proxy;
//   - the periodic full sync writes the changes it carries first, as a
//     partial sync, and the full sync right after, in the same Apply
//     (Sync.ChangesFirst, Dataplane): the changes are served as fast as any,
//     not after the whole table (kube-proxy writes both in one transaction);
//   - at most once per SyncPeriod (30s), before a sync that would be partial,
//     it has the path check whether the kernel still holds the frame of its
//     rules (iptables' hooks, nftables' base chains): another program that
//     flushed or deleted them is repaired by that sync, counted in
//     Health.Repairs;
//   - it remembers what the last successful sync left in the kernel, per service
//     port, so a sync after one change renders one port, not 10,000
//     (RenderPorts);
//   - it deletes the UDP conntrack entries a change leaves stale (StaleFlows),
//     and after a full sync every UDP entry of a port it serves that did not go
//     to one of the port's endpoints, every entry to the frontends of a port
//     without endpoints (StaleEntries: what came before the first sync, a
//     REDIRECT of the userspace mode say), as kube-proxy's
//     pkg/proxy/conntrack does; what fails is tried again at the next sync;
//   - it keeps the sync record /status shows (Health) and the path's sync
//     metrics (it is a prometheus.Collector).
//
// Policy is what a port's traffic policies decide (which policy chains it needs,
// where its internal and external traffic go), the same for both paths' rules.
//
// offload/ipvs has no rules to render and diff (it reconciles virtual servers
// with the kernel at every sync), so it uses dataplane.Syncer directly; the
// socket LB's maps use RenderPorts only.
package kernelsync
