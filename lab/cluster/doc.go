// Package cluster is where the lab's Services and pods come from, and the
// nodes that run them.
//
// Services come from one of three sources. The file-fed lab hands svcproxy
// and clusterdns a manifests file with the EndpointSlices written out
// (Manifests). The control-plane lab runs etcd, kube-apiserver and
// kube-controller-manager in the node, with a PKI of its own; kubectl
// applies the same Services, two StatefulSets (Objects) and deploy/lab's
// RBAC; a simulated kubelet plays the kubelet and the scheduler, starting a
// pod namespace for each Pod and reporting it Ready through the API, so
// that the real EndpointSlice controller writes the slices. The real-node
// lab runs a real node beside that control plane instead: containerd, the
// kubelet and kube-scheduler in the node's network namespace and in a
// mount namespace of the node's own.
package cluster
