#!/bin/sh
# Builds (or finds in the cache) kube-apiserver and etcd for svcproxy's tests, and
# kube-controller-manager and kubectl for the control-plane lab, and prints where
# they are:
#   APISERVER=/root/.cache/svcproxy/kapi/<versions>/kube-apiserver
#   ETCD=/root/.cache/svcproxy/kapi/<versions>/etcd
#   KUBE_CONTROLLER_MANAGER=/root/.cache/svcproxy/kapi/<versions>/kube-controller-manager
#   KUBECTL=/root/.cache/svcproxy/kapi/<versions>/kubectl
# A cold build takes minutes (tens of them on a busy machine) and ~2.4 GB of
# memory; a cached one, a second. -apiserver-only builds the first two; -node
# adds kubelet and kube-scheduler for the real-node lab:
#   KUBELET=/root/.cache/svcproxy/kapi/<versions>/kubelet
#   KUBE_SCHEDULER=/root/.cache/svcproxy/kapi/<versions>/kube-scheduler
# and -conformance adds Kubernetes' e2e.test and agnhost:
#   E2E_TEST=/root/.cache/svcproxy/kapi/<versions>/e2e.test
#   AGNHOST=/root/.cache/svcproxy/kapi/<versions>/agnhost
# and -cluster what a kubeadm cluster adds (-kube-proxy and -coredns one set of it):
#   KUBEADM=/root/.cache/svcproxy/kapi/<versions>/kubeadm
#   KUBE_PROXY=/root/.cache/svcproxy/kapi/<versions>/kube-proxy
#   COREDNS=/root/.cache/svcproxy/kapi/<versions>/coredns
#   CLUSTER_ETCD=/root/.cache/svcproxy/kapi/<versions>/etcd
#   CLUSTER_ETCDCTL=/root/.cache/svcproxy/kapi/<versions>/etcdctl
# and -kind kind v0.33.0 (docs/kind.md):
#   KIND=/root/.cache/svcproxy/kapi/<versions>/kind
# Exit status 2: no go command or no module proxy (the tests would skip).
set -eu
cd "$(dirname "$0")/../.."
exec go run ./test/kapi "$@"
