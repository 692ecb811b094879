// Package socklb is svcproxy's socket load balancer: ClusterIPs balanced at
// connect(), by eBPF programs on a cgroup (kernel/socklb), with no packet ever
// translated, as Cilium's kube-proxy replacement does for local traffic.
//
// A socket created by a process in the cgroup (a pod, or the node's own
// processes when the cgroup is the node's cgroup2 root) that connects to a
// ClusterIP port is connected to a backend instead: the hooks look the
// destination up in a services map and pick a slot in a backends map. Its
// packets carry the pod's address from the first SYN, so there is no DNAT, no
// conntrack NAT entry and no reverse translation on the way back.
//
// Maps renders each Snapshot into those maps' elements, one per ClusterIP
// (VIP, port, protocol), with the endpoints every other path chooses
// (service.Port.Categorize: internalTrafficPolicy Local, topology hints, the
// terminating fallback) and the ClientIP affinity timeout, and writes only the
// elements that changed: SetService for a new or changed frontend,
// DeleteService for one that is gone. It never reloads the maps.
//
// A hook sees only sockets of its cgroup. Everything else (packets forwarded
// from other hosts, NodePorts, externalIPs and LoadBalancer IPs, processes
// outside the cgroup, and connections to a port without endpoints, which the
// hooks leave alone) takes the kernel path beside it: Dataplane composes the
// maps with nftables mode, so `svcproxy --mode socklb` serves every packet,
// and hybrid mode's `--offload socklb` promotes hot ports into both.
// docs/architecture.md draws which packet takes which path.
package socklb
