// Package lab builds a small Kubernetes node out of network namespaces on one
// machine, so that svcproxy and clusterdns can be watched doing their work.
//
// The lab is split into rooms, each a package of its own:
//
//	topology  the hosts, their namespaces, addresses, links and routes; the
//	          lab's cgroup root (a Plan, rendered as `ip` commands)
//	pods      what runs in a pod (the Pod server that answers with its name
//	          and the client's address), the Probe that sends it traffic,
//	          and the Tally and Timeline of the answers
//	cluster   where Services and pods come from: the manifests file, or the
//	          control plane (etcd, kube-apiserver, kube-controller-manager)
//	          with a simulated kubelet or a real node (containerd, kubelet)
//
// Lab composes them: Up builds the Plan's namespaces, starts a Pod server in
// each pod, then clusterdns and svcproxy in the node (UpWith with a
// ControlPlane, or a real node, for the other sources), and returns once
// each answers; Down removes every namespace, process, mount and file it
// made. Traffic, Rules, Trace and Conntrack are what `svclab` shows of a
// running lab; Demo is the narrated walk of `make lab`.
//
// Lab keeps its state (pid files, logs, the manifests file, the control
// plane's keys and data) under one directory, /run/svclab by default, so
// that one svclab command finds what the one before it made. Up also
// mounts a bpffs on /run/svclab-bpf, where svcproxy pins the socket LB's
// maps and svclab rules and trace read them (socklbview.go).
package lab
