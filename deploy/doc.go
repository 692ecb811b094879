// Package deploy holds what runs svcproxy and clusterdns on a cluster, in
// place of kube-proxy and CoreDNS: kustomize directories applied with
// `kubectl apply -k` (no templating engine), and, in deploy/image, the
// builder of the container image.
//
//	rbac/   ServiceAccounts svcproxy and clusterdns, their ClusterRoles and bindings
//	base/   rbac, the svcproxy ConfigMap (its flags) and DaemonSet, the
//	        clusterdns Deployment and the kube-dns Service
//	kind/   base for a kind cluster, and cluster.yaml (kubeProxyMode: none)
//	lab/    base in svclab's control-plane lab (the lab's addresses)
//	realnode/ base on svclab's real node (svclab up --kubelet): the lab's
//	        addresses, and no /lib/modules
//	kubeadm/ kubeadm's own kube-proxy addon (ServiceAccount, RBAC, the
//	        kube-proxy ConfigMap with its KubeProxyConfiguration, the
//	        DaemonSet) with only the image changed to svcproxy's, as kubeadm
//	        v1.37.2 prints it for a cluster shaped as the real-node lab
//	coredns/ kubeadm's own coredns addon (ServiceAccount, ClusterRole
//	        system:coredns, the coredns ConfigMap with kubeadm's Corefile,
//	        the Deployment) with only the image changed to clusterdns's
//
// Files embeds the seven directories, so that svclab can apply deploy/lab in
// its lab from a binary that runs anywhere; docs/kind.md walks through kind.
package deploy
