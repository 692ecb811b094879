// Command svclab builds a one-node Kubernetes cluster out of network
// namespaces on this machine, runs svcproxy and clusterdns in it, and lets you
// send traffic through it and look at the rules that carried it.
//
//	svclab up [--mode MODE] [--control-plane | --kubelet]
//	                                 build the lab (svcproxy in MODE, default userspace);
//	                                 fed by a manifests file, or by a real control plane;
//	                                 --kubelet: and a real node running svcproxy and
//	                                 clusterdns as pods
//	svclab exec HOST -- CMD...       run CMD in a lab host: node, client, web-0...
//	svclab traffic [--n N] [--rate R] [--ipv6] TARGET
//	                                 N requests from the client; who answered, who they saw;
//	                                 --ipv6: to the name's IPv6 address (AAAA)
//	svclab rules                     svcproxy's iptables and ip6tables chains, nftables
//	                                 tables and the IPVS table, in the node
//	svclab mode [--offload P] MODE   restart svcproxy in another mode; socklb attaches
//	                                 the socket LB at the lab's cgroup2 subtree, where
//	                                 the pods' and the client's processes run; hybrid
//	                                 promotes to P (--offload socklb: to the socket LB)
//	svclab kubectl ARGS...           kubectl against the control-plane lab's API server
//	svclab pod NAME --ready=BOOL     a control-plane lab pod's Ready condition
//	svclab check NN                  check tutorial NN's exercise on the lab as it is
//	                                 (lab/exercise): ok, or what is missing and a hint
//	svclab down                      remove everything the lab made
//	svclab demo                      up, a narrated walk, down (what `make lab` runs)
//
// The lab is dual-stack: each host has an IPv4 and an IPv6 address (the
// IPv6 one mirrors the IPv4 one: 198.19.1.10 is 2001:db8:19::1:10), and
// Service web-dual has a ClusterIP of each family.
//
// With --control-plane, etcd, kube-apiserver and kube-controller-manager run in
// the node's namespace (the programs `make kapi` caches, or those in --kapi
// DIR), svclab plays the kubelet (`svclab kubelet`, in the background), and
// svcproxy and clusterdns watch the API server with their ServiceAccounts'
// tokens, under the RBAC of deploy/rbac.
//
// With --kubelet, a real node runs beside that control plane instead of
// svclab's kubelet: containerd (Debian's, with runc and the CNI bridge), the
// kubelet and kube-scheduler (`make node-bins`) in the node's network
// namespace and a mount namespace of its own, and svcproxy and clusterdns as
// the pods of deploy/realnode, from the archives of `make image` and `make
// e2e-images` next to svclab (or in --bin DIR). docs/kind.md says how.
//
// svcproxy and clusterdns are looked for next to svclab, then on PATH:
// `go build -o bin/ ./cmd/...` puts all three together. Everything but the
// demo's first line needs root.
package main
