// Package lab builds a small Kubernetes node out of network namespaces on one
// machine, so that svcproxy and clusterdns can be watched doing their work.
//
// The lab is split into rooms, each a package of its own:
//
//	topology  the hosts, their namespaces, addresses, links and routes
//	          (a Plan, rendered as `ip` commands); the Plan built on this
//	          machine (Net: commands and daemons in a host, the state
//	          directory); the lab's cgroup root and bpffs
//	pods      what runs in a pod (the Pod server that answers with its
//	          name and the client's address), the Probe that sends it
//	          traffic, the Tally and Timeline of the answers
//	cluster   where Services and pods come from: the manifests file, or
//	          the control plane (etcd, kube-apiserver,
//	          kube-controller-manager, its PKI) with the simulated kubelet
//	          or a real node (containerd, kubelet), or kubeadm's cluster of
//	          several real nodes; the node's svcproxy and clusterdns
//	          (Daemons)
//	views     the node's kernel state shown: rules, a packet traced
//	          through them, conntrack, counters, the socket LB's maps
//	demo      the narrated walk of `make lab`, each step's words a text
//	          file beside the code that runs it
//	web       the live page of `svclab web`
//	exercise  the tutorials' exercises, checked on the lab as svcproxy
//	          reports it (`svclab check NN`)
//
// Lab composes them for cmd/svclab: UpWith makes the lab's cgroups and
// bpffs and records what runs, then builds the lab of the source it is given
// (Cluster.UpFileFed, UpSimulated, UpRealNode or UpKubeadm), and returns once each
// program answers; Down removes every namespace, process, mount and file
// it made. Lab keeps nothing itself: everything one svclab command leaves
// for the next (pid files, logs, the manifests file, the control plane's
// keys and data, state.json) is in the state directory, /run/svclab by
// default.
package lab
