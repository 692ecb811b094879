// Package socklb is the kernel side of svcproxy's socket load balancer: eBPF
// programs on a cgroup v2 directory's socket hooks that rewrite the
// destination of connect() (and of sendmsg() on an unconnected UDP socket)
// from a Service's address to one of its backends, so the socket really
// talks to the pod and no packet is ever translated (no DNAT, no conntrack
// NAT entry), as Cilium's kube-proxy replacement does (bpf/bpf_sock.c,
// __sock4_xlate_fwd and __sock6_xlate_fwd). The way back is shown too:
// recvmsg() reports a UDP reply as coming from the Service address, and
// getpeername() a connected socket's peer as the Service (__sock4_xlate_rev).
//
// The programs, two of each, IPv4 and IPv6:
//
//	connect4/6, sendmsg4/6      forwardProg (connect.go): Service -> backend
//	recvmsg4/6, getpeername4/6  reverseProg (reverse.go): backend -> Service
//
// The maps, laid out in maps.go:
//
//	services  (VIP, port, protocol)        -> (id, count, flags, affinity timeout)
//	backends  (id, slot)                   -> (address, port)
//	revnat    (socket cookie, backend)     -> (VIP, port), LRU
//	affinity  (netns cookie, service id)   -> (slot, backend, last used), LRU
//	counts    service id                   -> translations, per CPU (counter.go)
//
// connect() to a Service picks slot bpf_get_prandom_u32() % count, or, with
// ClientIP affinity, the slot the client's network namespace used last,
// while that was less than the Service's timeout ago (affinity.go). SetService
// updates elements one at a time (slots first, then the count that makes them
// visible, then slots past it deleted), never reloading a map. A Service's id
// is handed out in order, not reused until the u32 counter wraps (ids.go).
//
// One set of maps serves both families: an address is 16 bytes, an IPv4
// address in its IPv4-mapped form (::ffff:198.18.0.10). Cilium keeps separate
// lb4_ and lb6_ maps; one set here halves the maps a learner reads and the
// code that updates them, costs 12 bytes per key, and makes an IPv6 socket
// connecting to an IPv4-mapped address (::ffff:198.18.0.10, which runs
// connect6) find the IPv4 Service with no special case.
//
// With Config.PinPath (a bpffs directory), the maps and the programs' links
// are pinned, so they outlive the process: a new Kernel adopts them and a
// restart does not interrupt the translation; Cleanup detaches and unpins
// (pin.go).
//
// The programs are written with github.com/cilium/ebpf's asm package,
// instruction by instruction with a comment each (program.go, connect.go,
// affinity.go, reverse.go), their C equivalents in the doc comments: they need no clang and no committed
// generated object, and a learner reads them as they are loaded.
//
// The hooks see only sockets created by processes inside the cgroup they are
// attached to (and its descendants); everything else (a process outside the
// subtree, packets forwarded from other hosts) is untouched and must be served
// by another path. A Service without endpoints is left alone too: the nftables
// path beside rejects it.
//
// The forward programs count each translation for its Service (counter.go):
// Kernel.Connections and Fake.Connections read the counts, which hybrid mode
// needs to see a port promoted to the socket LB go quiet.
//
// Kernel access is behind Interface: Kernel loads, attaches and updates the real
// maps; Fake keeps the same maps in memory and answers what the programs would
// decide (Connect, SendMsg, RecvMsg, GetPeerName, each with a Trace of the
// lookups), so callers' tests read as socket paths. Dump decodes the maps
// (Kernel's, Fake's, or pinned ones opened read-only with OpenPinned), and
// Fake.Load takes a Dump: the kernel's maps under the Fake's tracer (dump.go).
package socklb
