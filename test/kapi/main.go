// Command kapi builds (or finds in the cache) the kube-apiserver and etcd that
// svcproxy's tests run, and the kube-controller-manager and kubectl of the
// control-plane lab, and prints where they are, one "name=path" a line:
//
//	go run ./test/kapi
//	APISERVER=/root/.cache/svcproxy/kapi/kube-apiserver-v1.37.2_etcd-v3.6.16_0123abcd4567/kube-apiserver
//	ETCD=/root/.cache/svcproxy/kapi/kube-apiserver-v1.37.2_etcd-v3.6.16_0123abcd4567/etcd
//	KUBE_CONTROLLER_MANAGER=/root/.cache/svcproxy/kapi/kube-controller-manager-v1.37.2_kubectl-v1.37.2_89ab01cd23ef/kube-controller-manager
//	KUBECTL=/root/.cache/svcproxy/kapi/kube-controller-manager-v1.37.2_kubectl-v1.37.2_89ab01cd23ef/kubectl
//
// With -apiserver-only, only the first two. With -node, also the kubelet and
// kube-scheduler of the real-node lab:
//
//	KUBELET=/root/.cache/svcproxy/kapi/kubelet-v1.37.2_kube-scheduler-v1.37.2_cdef01234567/kubelet
//	KUBE_SCHEDULER=/root/.cache/svcproxy/kapi/kubelet-v1.37.2_kube-scheduler-v1.37.2_cdef01234567/kube-scheduler
//
// With -conformance, also Kubernetes' e2e.test and agnhost, for the
// conformance run against the real node:
//
//	E2E_TEST=/root/.cache/svcproxy/kapi/e2e.test-v1.37.2_agnhost-v1.37.2_456789abcdef/e2e.test
//	AGNHOST=/root/.cache/svcproxy/kapi/e2e.test-v1.37.2_agnhost-v1.37.2_456789abcdef/agnhost
//
// With -cluster, also what a kubeadm cluster adds: kubeadm and kube-proxy,
// and CoreDNS and etcd (with etcdctl) at the versions kubeadm deploys, the
// programs of its images (-kube-proxy and -coredns ask for one of those sets):
//
//	KUBEADM=/root/.cache/svcproxy/kapi/kubeadm-v1.37.2_kube-proxy-v1.37.2_0a1b2c3d4e5f/kubeadm
//	KUBE_PROXY=/root/.cache/svcproxy/kapi/kubeadm-v1.37.2_kube-proxy-v1.37.2_0a1b2c3d4e5f/kube-proxy
//	COREDNS=/root/.cache/svcproxy/kapi/coredns-v1.14.6_6f5e4d3c2b1a/coredns
//	CLUSTER_ETCD=/root/.cache/svcproxy/kapi/etcd-v3.7.0_etcdctl-v3.7.0_9a8b7c6d5e4f/etcd
//	CLUSTER_ETCDCTL=/root/.cache/svcproxy/kapi/etcd-v3.7.0_etcdctl-v3.7.0_9a8b7c6d5e4f/etcdctl
//	KIND=/root/.cache/svcproxy/kapi/kind-v0.33.0_0f1e2d3c4b5a/kind
//
// The versions are pinned by the nested modules beside this file
// (apiserver/, etcd/, controlplane/, node/, conformance/, cluster/,
// coredns/, clusteretcd/, kind/); see README.md. The tests call the same code
// (internal/k8sbin), so running this first only moves the cold build
// out of the first test's time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/svcproxy/svcproxy/internal/k8sbin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	apiOnly := flag.Bool("apiserver-only", false, "build only kube-apiserver and etcd")
	node := flag.Bool("node", false, "build kubelet and kube-scheduler as well (the real-node lab)")
	conformance := flag.Bool("conformance", false, "build e2e.test and agnhost as well (the conformance run)")
	cluster := flag.Bool("cluster", false, "build kubeadm, kube-proxy, CoreDNS and kubeadm's etcd as well (the kubeadm cluster)")
	kubeProxy := flag.Bool("kube-proxy", false, "build kube-proxy (with kubeadm) as well")
	coreDNS := flag.Bool("coredns", false, "build CoreDNS as well")
	kind := flag.Bool("kind", false, "build kind v0.33.0 as well (docs/kind.md)")
	cachedOnly := flag.Bool("cached-only", false, "build nothing: print the cached programs, or exit 1")
	flag.Parse()
	bins, err := k8sbin.Build(ctx, k8sbin.Config{Log: os.Stderr, ControlPlane: !*apiOnly, Node: *node, Conformance: *conformance,
		Cluster: *cluster, KubeProxy: *kubeProxy, CoreDNS: *coreDNS, Kind: *kind, CachedOnly: *cachedOnly})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kapi:", err)
		if errors.Is(err, k8sbin.ErrUnavailable) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	fmt.Printf("APISERVER=%s\nETCD=%s\n", bins.APIServer, bins.Etcd)
	if !*apiOnly {
		fmt.Printf("KUBE_CONTROLLER_MANAGER=%s\nKUBECTL=%s\n", bins.ControllerManager, bins.Kubectl)
	}
	if *node {
		fmt.Printf("KUBELET=%s\nKUBE_SCHEDULER=%s\n", bins.Kubelet, bins.Scheduler)
	}
	if *conformance {
		fmt.Printf("E2E_TEST=%s\nAGNHOST=%s\n", bins.E2ETest, bins.Agnhost)
	}
	if *cluster || *kubeProxy {
		fmt.Printf("KUBEADM=%s\nKUBE_PROXY=%s\n", bins.Kubeadm, bins.KubeProxy)
	}
	if *cluster || *coreDNS {
		fmt.Printf("COREDNS=%s\n", bins.CoreDNS)
	}
	if *cluster {
		fmt.Printf("CLUSTER_ETCD=%s\nCLUSTER_ETCDCTL=%s\n", bins.ClusterEtcd, bins.ClusterEtcdctl)
	}
	if *kind {
		fmt.Printf("KIND=%s\n", bins.Kind)
	}
}
