// Package topology is the lab's network: which hosts there are, their
// addresses, and the network namespaces, links and routes that make them.
//
// A Plan says what the lab looks like: a node namespace where svcproxy and
// clusterdns run, a client namespace, one namespace per pod and an outside
// host, each linked to the node by a veth pair and routed the way Calico
// routes pods (a /32 route per pod on the node, and on the pod side routes
// to the Service and pod ranges via the node, and nothing else: no route out
// of the lab). Plan.Commands renders the plan as `ip` commands, a pure
// function with a golden test; the lab runs them.
//
// The lab is dual-stack (Plan.DualStack): each host also has an IPv6
// address, its IPv4 one written into 2001:db8:19::/64 (Plan.IPv6Of), routed
// the same way, and the Service range has an IPv6 half, 2001:db8:18::/112.
//
// A Net is the Plan built on this machine: it runs the `ip` commands (Build,
// AddHost for a host beyond the Plan), runs a command in a host (Exec) or
// starts a daemon there with its pid file and log in the state directory
// (Start, Wait), keeps what one svclab command leaves for the next
// (State), and takes the namespaces down (Down), finding what a crashed
// run left: every name is fixed.
//
// Cgroups is the lab's cgroup root, the same name in every cgroup hierarchy:
// a cgroup2 subtree where the pods' and the client's processes are born
// (where svcproxy's socket LB attaches), and the directory the real node's
// kubelet puts its pods under; BPFFS is the bpffs where svcproxy pins the
// socket LB. netns.go and process.go hold what the lab does with namespaces
// and processes: list them, dial from inside one, stop what runs there.
package topology
