// Package ipvs puts the kernel's IP Virtual Server (LVS) behind a small Interface.
//
// A virtual server is a service address (protocol, IP, port) with a scheduler; behind
// it sit real servers, each with a weight. The kernel picks a real server for every new
// connection with one hash lookup and rewrites the destination (masquerading, the only
// forwarding method svcproxy uses). ipvsadm -ln shows the same objects; Format prints
// them in that shape.
//
// Kernel talks to the kernel through github.com/moby/ipvs (generic netlink) in the
// network namespace of the OS thread that called New. Fake keeps the same state in
// memory and refuses what the kernel refuses. Available says whether the running kernel
// has IPVS at all, and if not, why.
package ipvs
