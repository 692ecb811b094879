// Package k8sbin builds the Kubernetes programs svcproxy's tests and lab run,
// kube-apiserver and etcd, for the control-plane lab kube-controller-manager
// and kubectl, for the real-node lab kubelet and kube-scheduler, for the
// conformance run Kubernetes' e2e.test and agnhost, and for the kubeadm
// cluster kubeadm, kube-proxy, and CoreDNS and etcd at the versions kubeadm
// deploys, from the Go module proxy,
// and keeps them in a cache outside the repository so that only the first
// build on a machine pays for it.
//
// The versions live in small Go modules under test/kapi (apiserver/, etcd/,
// controlplane/, node/, conformance/, cluster/, coredns/ and clusteretcd/,
// each with its own go.mod and go.sum,
// so svcproxy's go.mod stays clean); Build reads them there.
// Programs are cached in sets, each in a directory named by its programs'
// versions and a hash of their modules' go.mod and go.sum: pinning another
// version, or any dependency, builds anew. The API server's set
// (kube-apiserver, etcd), the control plane's (kube-controller-manager,
// kubectl), the node's (kubelet, kube-scheduler), the conformance run's
// (e2e.test, agnhost), the cluster's (kubeadm, kube-proxy), CoreDNS and
// kubeadm's etcd (etcd, etcdctl) are apart, so a cache made before a later
// set existed stays good.
//
// A cold build takes minutes and ~2.4 GB of memory to link kube-apiserver;
// the Kubernetes modules pin the same versions, so the later sets reuse the
// packages kube-apiserver compiled (the go build cache).
// A file lock lets many test processes ask at once
// while one of them builds. The package uses only the standard library, so
// `go run ./test/kapi` (what test/kapi/build.sh and the Makefile use) starts
// quickly.
package k8sbin
