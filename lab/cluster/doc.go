// Package cluster is where the lab's Services and pods come from, and the
// nodes that run them.
//
// Services come from one of three sources. The file-fed lab hands svcproxy
// and clusterdns a manifests file with the EndpointSlices written out
// (Manifests; Cluster.UpFileFed), and `svclab pod` edits the slices in it
// as the EndpointSlice controller would (Cluster.SetPodConditions). The
// control-plane lab runs etcd, kube-apiserver and kube-controller-manager
// in the node, with a PKI of its own (controlplane.go, pki.go); kubectl
// applies the same Services, two StatefulSets (Objects) and deploy/lab's
// RBAC; a SimulatedKubelet (simkubelet*.go) plays the kubelet and the
// scheduler, starting a pod namespace for each Pod and reporting it Ready
// through the API, so that the real EndpointSlice controller writes the
// slices (Cluster.UpSimulated). The real-node lab runs real nodes beside that
// control plane instead (Cluster.UpRealNode): containerd, the kubelet and
// kube-scheduler, with svcproxy and clusterdns as pods of deploy/realnode.
//
// A Node is one real node: its network namespace (a host of the Plan), a
// mount namespace of its own where /run, /var/lib and /var/log are the
// node's directories and the sysctls the kubelet checks are files of the
// lab (nodefiles.go renders it all), its containerd and its kubelet, each
// a process of the lab with a name of the node's. Everything that differs
// from node to node is a field of Node, so that a cluster can have several;
// Cluster.Nodes makes the one the lab runs today, and Cluster.Down takes
// down every one it lists.
//
// Daemons are the node's svcproxy and clusterdns: processes of the node's
// namespace in the file-fed and the control-plane lab, which `svclab mode`
// restarts in another mode (Daemons.SetModeWith) and which WaitApplied
// watches until a change has reached the rules; pods of the real node,
// whose ConfigMap `svclab mode` patches.
package cluster
