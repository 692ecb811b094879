// Package lab builds a small Kubernetes node out of network namespaces on one
// machine, so that svcproxy and clusterdns can be watched doing their work.
//
// A Plan says what the cluster looks like: a node namespace where svcproxy and
// clusterdns run, a client namespace, and one namespace per pod, each linked to
// the node by a veth pair and routed the way Calico routes pods (a /32 route per
// pod on the node, and on the pod side routes to the Service and pod ranges via
// the node, and nothing else: no route out of the lab). Plan.Commands renders the
// plan as `ip` commands, a pure function; Lab.Up runs them.
//
// The lab is dual-stack (Plan.DualStack): each host also has an IPv6 address,
// its IPv4 one written into 2001:db8:19::/64 (Plan.IPv6Of), routed the same
// way, and the Service range has an IPv6 half, 2001:db8:18::/112. Services
// choose their families with ipFamilyPolicy; all but web-dual are
// SingleStack IPv4, so the IPv4 lab reads as it always did.
//
// Each pod runs this package's Pod server (the svclab binary itself, as
// `svclab pod`), which answers every HTTP request and UDP datagram with its own
// name and the address the client came from: the one fact a student needs to see
// which pod a Service chose and whether the proxy kept the client's address.
// Probe sends that traffic from the client and Tally turns the answers into a
// table and a bar chart.
//
// Services come from one of two sources. The file-fed lab (Up) hands
// svcproxy and clusterdns a manifests file with the EndpointSlices written
// out. The control-plane lab (UpWith and a ControlPlane) runs etcd,
// kube-apiserver and kube-controller-manager in the node; kubectl applies the
// same Services and two StatefulSets (cluster.yaml) and deploy/lab's RBAC;
// Kubelet plays the kubelet and the scheduler, starting a pod namespace for
// each Pod and reporting it Ready through the API, so that the real
// EndpointSlice controller writes the slices; svcproxy and clusterdns watch
// the API server with their ServiceAccounts' tokens.
//
// The real-node lab (UpOptions.RealNode, `svclab up --kubelet`) runs a real
// node beside that control plane instead: containerd, the kubelet and
// kube-scheduler in the node's network namespace and in a mount namespace of
// the node's own, where /run, /var/lib and /var/log are the lab's and the
// sysctls the kubelet checks are files of the lab (realnode.go renders it
// all); pods get addresses from the bridge CNI in Plan.PodCIDR, and
// svcproxy and clusterdns run as deploy/realnode's DaemonSet and Deployment.
// Down kills what runs in the kubelet's cgroup root and removes it.
//
// Every lab has a cgroup2 subtree (cgroup.go): Up mounts cgroup2 on
// /run/svclab-cgroup2 and starts each pod's and the client's processes in
// their own child of /svclab, where svcproxy's socket-LB hook attaches
// (--mode socklb, or hybrid's --offload socklb); the node's and the outside
// host's processes stay out. Up also mounts a bpffs on /run/svclab-bpf,
// where svcproxy pins the socket LB's maps and svclab rules and trace read
// them (socklbview.go). Down removes both.
//
// Lab keeps its state (pid files, logs, the manifests file, the control
// plane's keys and data) under one directory, /run/svclab by default, and Down
// removes every namespace, process, mount and file it made. Demo is the
// narrated walk of `make lab`.
package lab
