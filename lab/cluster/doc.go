// Package cluster is where the lab's Services and pods come from, and the
// nodes that run them.
//
// Services come from one of four sources, each brought up by a method of
// Cluster; the files of each stand together:
//
//	file-fed       manifests.go, endpoints.go: svcproxy and clusterdns read
//	               a manifests file with the EndpointSlices written out
//	               (Manifests; Cluster.UpFileFed), and `svclab pod` edits
//	               the slices in it as the EndpointSlice controller would
//	               (Cluster.SetPodConditions).
//	control plane  controlplane.go, pki.go, kubectl.go: etcd,
//	               kube-apiserver and kube-controller-manager in the node,
//	               with a PKI of their own; kubectl applies the same
//	               Services, two StatefulSets (Objects) and deploy/lab's
//	               RBAC.
//	simulated      simulated.go, simkubelet.go, simkubeletpods.go: beside
//	               that control plane, a SimulatedKubelet plays the kubelet
//	               and the scheduler, starting a pod namespace for each Pod
//	               and reporting it Ready through the API, so that the real
//	               EndpointSlice controller writes the slices
//	               (Cluster.UpSimulated). No containerd, no real kubelet.
//	real node      realnode.go, node.go, nodefiles.go, nodedown.go: beside
//	               that control plane, a real node instead: containerd, the
//	               kubelet and kube-scheduler, with svcproxy and clusterdns
//	               as pods of deploy/realnode (Cluster.UpRealNode).
//	kubeadm        kubeadm*.go (its configuration, programs, network,
//	               start and `svclab use`):
//	               kubeadm makes the cluster on several real nodes, with
//	               its own control plane, kube-proxy and CoreDNS
//	               (Cluster.UpKubeadm); `svclab use` puts svcproxy or
//	               clusterdns in their place, as an operator would, by the
//	               image of kubeadm's DaemonSet and Deployment.
//
// A Node is one real node: its network namespace (a host of the Plan), a
// mount namespace of its own where /run, /var/lib and /var/log are the
// node's directories and the sysctls the kubelet checks are files of the
// lab (nodefiles.go renders it all), its containerd and its kubelet, each
// a process of the lab with a name of the node's. Everything that differs
// from node to node is a field of Node, and a node's steps are its methods
// (Node.start, Node.prepare), so that a cluster can have several:
// Cluster.Nodes lists the Plan's node, or the kubeadm cluster's nodes, and
// Cluster.Down takes down every one a lab may have run.
//
// Daemons are the node's svcproxy and clusterdns: processes of the node's
// namespace in the file-fed and the control-plane lab, which `svclab mode`
// restarts in another mode (Daemons.SetModeWith) and which WaitApplied
// watches until a change has reached the rules (synced.go); pods of the
// real node, whose ConfigMap `svclab mode` patches.
package cluster
