// Package hybrid is --mode hybrid: every service port starts in userspace, and
// the Promoter moves the hot ones to a kernel path (any dataplane.KernelPath:
// nftables, iptables, IPVS, the socket LB) and the quiet ones back, one port
// at a time, without breaking a connection. It sits above the paths it
// composes, as kube-proxy's metaproxier sits above its proxiers: it imports
// userspace and dataplane, and builds its kernel path through Config.Kernel;
// no path imports it.
//
// The Promoter (promoter.go) is the decision, with no I/O: it is fed each
// service port's cumulative count of new connections, sampled over time (the
// userspace counters while a port is in userspace, the kernel path's once it
// is promoted), and it answers with Moves. A port is hot when every sampled
// interval for PromoteAfter had a new-connection rate of at least
// PromoteConnRate; it goes back to userspace after DemoteAfter of intervals
// below that rate (never, when DemoteAfter is 0). A Clock drives it, so tests
// step time by hand.
//
// Dataplane (hybrid.go) carries the Moves out and confirms each with Moved; until
// then the Promoter proposes it again. Three orderings make a move seamless,
// each tested on the kernel Fakes (hybrid_test.go) and on the real kernel:
//
//   - startup (and every Sync): the userspace listeners and portals first, then
//     the kernel path, so a port the last process had promoted is caught by its
//     new portal before the kernel path lets its rules go;
//   - promote: the kernel path first (its hooks are met before the portals),
//     then the portal goes;
//   - demote: the portal first, then the kernel path lets the port go (IPVS
//     drains it: weight 0 until its connections end).
//
// A connection keeps the NAT decision conntrack recorded when it opened, so one
// that a portal brought to the userspace listener finishes there (the listener
// stays while the port is promoted), and one that the kernel carried finishes
// on its endpoint.
package hybrid
