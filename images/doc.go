// Package images builds the container images Kubernetes' e2e tests (v1.37.2)
// run, and those a cluster made by kubeadm v1.37.2 runs (Kubeadm), for nodes
// that can reach no registry: each under the exact name and tag
// test/utils/image/manifest.go (or `kubeadm config images list`) gives it,
// as an archive that containerd imports (`ctr -n k8s.io images import
// --all-platforms FILE`) and `docker load` takes, written with deploy/image
// (go-containerregistry, no Docker).
//
// They are not Kubernetes' images, which are Alpine and Debian with their
// package managers; they hold what the Service and DNS tests run in them,
// from two sources: the Go programs (agnhost, from k8s.io/kubernetes at the
// same version through test/kapi, and pause, a Go pause.c in ./pause), and
// this machine's Debian 12 packages (busybox-static for the shell and
// utilities, dnsutils' dig and nslookup, curl, wget, netcat-openbsd,
// iproute2, glibc's getent), with the shared libraries ldd finds for them.
// docs/kind.md lists each image, what is in it and how it differs.
//
// kubeadm's images hold the programs internal/k8sbin builds at the versions
// kubeadm deploys (kube-apiserver, kube-controller-manager, kube-scheduler
// and kube-proxy v1.37.2, etcd v3.7.0, CoreDNS v1.14.6) and kube-proxy's
// netfilter tools from Debian's packages; see kubeadm.go.
//
//	go run ./images/mkimages -o bin/e2e-images               # make e2e-images
//	go run ./images/mkimages -kubeadm -o bin/kubeadm-images  # make kubeadm-images
package images
