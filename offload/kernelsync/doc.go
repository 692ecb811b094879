// Package kernelsync is how a rule-writing kernel mode keeps the kernel in step
// with the latest Snapshot, written once for offload/iptables and
// offload/nftables. Each mode plugs in only what is its own (Mode): how a
// Snapshot renders, and how a rendering is written to the kernel.
//
// Proxier holds the bookkeeping around that:
//
//   - a sync is full (write everything, delete the port objects the kernel holds
//     that belong to nothing) at the first sync, after any failure, once
//     FullSyncPeriod (1h) has passed since the end of the last full one, and
//     when the periodic check of the kernel fails; otherwise it is partial
//     (write only the ports that changed: kube-proxy KEP-3453), periodic
//     resyncs included, as in kube-proxy;
//   - at most once per SyncPeriod (30s), before a sync that would be partial,
//     it asks the mode whether the kernel still holds the frame of its rules
//     (Mode.Check: iptables' hooks, nftables' base chains): another program
//     that flushed or deleted them is repaired by that sync, counted in
//     Health.Repairs;
//   - it remembers what the last successful sync left in the kernel, per service
//     port, so a sync after one change renders one port, not 10,000;
//   - it deletes the UDP conntrack entries a change leaves stale (StaleFlows),
//     and after a full sync every UDP entry of a port it serves that did not go
//     to one of the port's endpoints, every entry to the frontends of a port
//     without endpoints (StaleEntries: what came before the first sync, a
//     REDIRECT of the userspace mode say), as kube-proxy's
//     pkg/proxy/conntrack does; what fails is tried again at the next sync;
//   - it keeps the sync record /status shows (Health).
//
// Policy is what a port's traffic policies decide (which policy chains it needs,
// where its internal and external traffic go), the same for both modes' rules.
//
// Dataplane puts a Proxier behind dataplane.Interface: dataplane.Syncer (one sync
// at a time, retries with backoff, a resync a period after the last sync ended,
// the lag bound of /healthz, kube-proxy's sync metrics) drives it, and the mode's
// own metrics come from its Health.
//
// offload/ipvs has no rules to render and diff (it reconciles virtual servers
// with the kernel at every sync), so it uses dataplane.Syncer directly.
package kernelsync
