package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/internal/k8sbin"
)

// KubeadmPrograms are what `svclab up --nodes N` runs besides the machine's
// containerd, runc and CNI plugins: kubeadm, the kubelet and kubectl of
// KubernetesVersion, runc-capbound (kube-proxy's DaemonSet is privileged),
// and the image archives every node's containerd imports, since nothing is
// pulled.
type KubeadmPrograms struct {
	Kubeadm, Kubelet, Kubectl string
	// Runc is runc-capbound, containerd's runc on every node.
	Runc string
	// Images are kubeadm's (`make kubeadm-images`), svcproxy's (`make
	// image`) and, when built, the e2e tests' (`make e2e-images`).
	Images []string
}

// FindKubeadmPrograms returns the kubeadm cluster's programs: kubeadm,
// kubelet and kubectl in dir, or, when dir is "", those `make cluster-bins`
// built; runc-capbound in binDir or on PATH; the images in imageDir (where
// `make kubeadm-images`, `make image` and `make e2e-images` write them).
// It builds nothing.
func FindKubeadmPrograms(dir, binDir, imageDir string) (KubeadmPrograms, error) {
	progs := KubeadmPrograms{Kubeadm: filepath.Join(dir, "kubeadm"), Kubelet: filepath.Join(dir, "kubelet"), Kubectl: filepath.Join(dir, "kubectl")}
	if dir == "" {
		bins, err := k8sbin.Build(context.Background(), k8sbin.Config{CachedOnly: true, ControlPlane: true, Node: true, Cluster: true})
		if err != nil {
			return KubeadmPrograms{}, fmt.Errorf("kubeadm cluster: %w; build them with `make cluster-bins` (minutes, once per machine)", err)
		}
		progs.Kubeadm, progs.Kubelet, progs.Kubectl = bins.Kubeadm, bins.Kubelet, bins.Kubectl
	}
	for _, p := range []string{progs.Kubeadm, progs.Kubelet, progs.Kubectl} {
		if _, err := os.Stat(p); err != nil {
			return KubeadmPrograms{}, fmt.Errorf("kubeadm cluster: %w", err)
		}
	}
	progs.Runc = filepath.Join(binDir, "runc-capbound")
	if _, err := os.Stat(progs.Runc); err != nil {
		return KubeadmPrograms{}, fmt.Errorf("kubeadm cluster: %w; build it with `make build`", err)
	}
	for _, s := range images.Kubeadm() {
		f := filepath.Join(imageDir, "kubeadm-images", s.File)
		if _, err := os.Stat(f); err != nil {
			return KubeadmPrograms{}, fmt.Errorf("kubeadm cluster: image %s: %w; build kubeadm's images with `make kubeadm-images`", s.Ref, err)
		}
		progs.Images = append(progs.Images, f)
	}
	svcproxy := filepath.Join(imageDir, "svcproxy-image.tar")
	if _, err := os.Stat(svcproxy); err != nil {
		return KubeadmPrograms{}, fmt.Errorf("kubeadm cluster: %w; build svcproxy's image with `make image`", err)
	}
	progs.Images = append(progs.Images, svcproxy)
	for _, s := range images.All() {
		f := filepath.Join(imageDir, "e2e-images", s.File)
		if _, err := os.Stat(f); err == nil && s.File != "pause.tar" {
			progs.Images = append(progs.Images, f)
		}
	}
	return progs, nil
}

// FindKubeProxy returns the kube-proxy program of the kubeadm cluster's
// image, which `svclab use svcproxy` runs with --cleanup in every node: in
// dir, or, when dir is "", the one `make cluster-bins` built. It builds
// nothing.
func FindKubeProxy(dir string) (string, error) {
	p := filepath.Join(dir, "kube-proxy")
	if dir == "" {
		bins, err := k8sbin.Build(context.Background(), k8sbin.Config{CachedOnly: true, ControlPlane: true, Node: true, Cluster: true})
		if err != nil {
			return "", fmt.Errorf("kube-proxy: %w; build it with `make cluster-bins`", err)
		}
		p = bins.KubeProxy
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("kube-proxy: %w", err)
	}
	return p, nil
}
