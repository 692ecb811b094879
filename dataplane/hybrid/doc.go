// Package hybrid is --mode hybrid: every service port starts in userspace, and
// the offload.Promoter moves the hot ones to a kernel path (any
// dataplane.KernelPath: iptables, IPVS) and the quiet ones back, one port at a
// time, without breaking a connection. Three orderings make that so, each
// tested on the kernel Fakes (hybrid_test.go) and on the real kernel:
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
