// Command mkkindnode writes the kind node image (images/kindnode) as an
// archive for `docker load`, from the repository's root (`make kind-image`):
//
//	go run ./images/mkkindnode -o bin/kind-node.tar
//	...
//	bin/kind-node.tar: svcproxy.test/kind-node:v1.37.2, 412.3 MB, in 2m31s
//
// It needs root (debootstrap, chroot), Debian's debootstrap and containerd,
// kubeadm's image archives (`make kubeadm-images`, -kubeadm-images DIR) and
// test/kapi's kubelet, kubeadm, kubectl (`make cluster-bins`); it builds
// runc-capbound and kindnet (images/kindnet) and kindnet's image itself.
// The archive is also linked into the cache (kindnode.CachedArchive), where
// the kind smoke test of `make test` finds it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/images/kindnode"
	"github.com/svcproxy/svcproxy/internal/k8sbin"
)

func main() {
	out := flag.String("o", "bin/kind-node.tar", "write the image archive to `FILE`")
	kubeadmImages := flag.String("kubeadm-images", "bin/kubeadm-images", "`DIR` of kubeadm's image archives (make kubeadm-images)")
	cache := flag.String("cache", "", "`DIR` that keeps the debootstrapped root (default: the user cache's svcproxy/kind-node)")
	mirror := flag.String("mirror", "", "debootstrap's Debian `MIRROR` (default: debootstrap's)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	if err := run(ctx, *out, *kubeadmImages, *cache, *mirror); err != nil {
		fmt.Fprintln(os.Stderr, "mkkindnode:", err)
		os.Exit(1)
	}
	fi, err := os.Stat(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkkindnode:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s, %.1f MB, in %s\n", *out, kindnode.Ref, float64(fi.Size())/1e6, time.Since(start).Round(time.Second))
}

func run(ctx context.Context, out, kubeadmImages, cache, mirror string) error {
	if cache == "" {
		dir, err := kindnode.DefaultCacheDir()
		if err != nil {
			return err
		}
		cache = dir
	}
	bins, err := k8sbin.Build(ctx, k8sbin.Config{Log: os.Stderr, ControlPlane: true, Node: true, Cluster: true, Kind: true})
	if err != nil {
		return err
	}
	kindModule, err := kindModuleDir(ctx)
	if err != nil {
		return err
	}
	archives, err := filepath.Glob(filepath.Join(kubeadmImages, "*.tar"))
	if err != nil {
		return err
	}
	if len(archives) != len(images.Kubeadm()) {
		return fmt.Errorf("%s holds %d archives, not kubeadm's %d images: make kubeadm-images", kubeadmImages, len(archives), len(images.Kubeadm()))
	}
	tmp, err := os.MkdirTemp("", "svcproxy-mkkindnode-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	progs, err := image.BuildBinaries(tmp, "runc-capbound", "images/kindnet")
	if err != nil {
		return err
	}
	kindnet, err := images.Write(filepath.Join(tmp, "images"), images.Config{Kindnet: progs["kindnet"]}, []images.Spec{images.Kindnet()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	err = kindnode.Write(ctx, kindnode.Config{
		KindModule:   kindModule,
		Kubelet:      bins.Kubelet,
		Kubeadm:      bins.Kubeadm,
		Kubectl:      bins.Kubectl,
		RuncCapbound: progs["runc-capbound"],
		Archives:     append(archives, kindnet...),
		KindnetRef:   images.KindnetRef,
		CacheDir:     cache,
		Mirror:       mirror,
		Log:          os.Stderr,
	}, out)
	if err != nil {
		return err
	}
	// A second name in the cache, for the kind smoke test of make test,
	// which runs in a checkout of its own.
	cached := kindnode.CachedArchive(cache)
	os.Remove(cached)
	if err := os.Link(out, cached); err != nil {
		return exec.CommandContext(ctx, "cp", out, cached).Run()
	}
	return nil
}

// kindModuleDir is the module cache's copy of sigs.k8s.io/kind at the
// version test/kapi/kind pins (the kind that `make kind-bin` builds).
func kindModuleDir(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "sigs.k8s.io/kind")
	cmd.Dir = filepath.Join("test", "kapi", "kind")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download sigs.k8s.io/kind (in test/kapi/kind): %w", err)
	}
	var m struct{ Dir, Version, Error string }
	if err := json.Unmarshal(b, &m); err != nil {
		return "", err
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download sigs.k8s.io/kind: %s", m.Error)
	}
	return m.Dir, nil
}
