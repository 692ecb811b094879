// Package images builds the container images Kubernetes' e2e tests (v1.37.2)
// run, for a node that can reach no registry: each under the exact name and
// tag test/utils/image/manifest.go gives it, as an archive that containerd
// imports (`ctr -n k8s.io images import --all-platforms FILE`) and `docker
// load` takes, written with deploy/image (go-containerregistry, no Docker).
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
//	go run ./images/mkimages -o bin/e2e-images    # make e2e-images
package images
