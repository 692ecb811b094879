// Package image builds svcproxy's container image without a Docker daemon,
// with go-containerregistry: one layer holding the static svcproxy and
// clusterdns binaries (svcproxy also as /usr/local/bin/kube-proxy, the
// command of kubeadm's kube-proxy DaemonSet) and the netfilter tools the dataplanes run
// (iptables-restore and -save, nft, ipset, conntrack, modprobe), copied from
// this machine's Debian packages together with the shared libraries they load.
// Root, the file tree an image's one layer is made of, is exported: the
// images of Kubernetes' e2e tests (images) are put together with it.
//
// ClusterDNS is the same image with clusterdns as its entrypoint, under
// CoreDNS's image's name for it, /coredns, for kubeadm's coredns
// Deployment, which gives arguments only; WriteImages puts both names in
// one archive, their layer once.
//
// WriteArchive writes the image as a tar file that is at once an OCI image
// layout (index.json, blobs/) and a `docker save` archive (manifest.json with
// RepoTags), the format `docker save` itself writes since Docker 25: `docker
// load` and `kind load image-archive` (containerd's import) both take it.
//
//	go run ./deploy/image/mkimage -o bin/svcproxy-image.tar   # make image
package image
