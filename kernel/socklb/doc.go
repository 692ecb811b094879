// Package socklb is the kernel side of svcproxy's socket load balancer: an eBPF
// program on a cgroup v2 directory's connect4 hook that rewrites the destination
// of connect() from a Service's address to a backend's, once per socket, so the
// socket really connects to the pod and no packet is ever translated (no DNAT,
// no conntrack NAT entry), as Cilium's kube-proxy replacement does
// (bpf/bpf_sock.c, __sock4_xlate_fwd).
//
// This is the foundation (issue 31, first step): one program, connect4, and one
// hash map, services, keyed by (VIP, port, protocol) with one backend each. The
// program is written with github.com/cilium/ebpf's asm package, instruction by
// instruction with a comment each (program.go): it needs no clang and no
// committed generated object, and a learner reads it as it is loaded.
//
// The hook sees only sockets created by processes inside the cgroup it is
// attached to (and its descendants); everything else (a process outside the
// subtree, packets forwarded from other hosts) is untouched and must be served
// by another path.
//
// Kernel access is behind Interface: Kernel loads, attaches and updates the real
// map; Fake keeps the same map in memory and answers what the program would
// decide for a connect(), so callers' tests read as packet paths.
package socklb
