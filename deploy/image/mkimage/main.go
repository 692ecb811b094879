// Command mkimage builds svcproxy's container image without a Docker daemon
// and writes it as a tar file that `docker load` and `kind load
// image-archive` take (`make image` runs it from the repository's root):
//
//	go run ./deploy/image/mkimage -o bin/svcproxy-image.tar
//
// It builds svcproxy and clusterdns static (CGO_ENABLED=0) and puts them, with
// the netfilter tools of this machine's Debian packages, on an empty base;
// see package image. The archive holds two names for that root filesystem:
// svcproxy.test/svcproxy:dev starts svcproxy, svcproxy.test/clusterdns:dev
// clusterdns (image.ClusterDNS), for kubeadm's coredns Deployment.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/svcproxy/svcproxy/deploy/image"
)

func main() {
	out := flag.String("o", "bin/svcproxy-image.tar", "write the image archive to `FILE`")
	ref := flag.String("name", image.DefaultRef, "the image's `NAME:TAG`")
	flag.Parse()
	if err := run(*out, *ref); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(out, ref string) error {
	dir, err := os.MkdirTemp("", "svcproxy-mkimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bins, err := image.BuildBinaries(dir, "svcproxy", "clusterdns")
	if err != nil {
		return err
	}
	img, err := image.Build(image.Config{Binaries: bins})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	dns, err := image.ClusterDNS(img)
	if err != nil {
		return err
	}
	if err := image.WriteImages(out, image.Named{Ref: ref, Image: img}, image.Named{Ref: image.ClusterDNSRef, Image: dns}); err != nil {
		return err
	}
	if err := report(out, img, ref); err != nil {
		return err
	}
	return report(out, dns, image.ClusterDNSRef)
}

// report says what was written: the name, the digest and the sizes.
func report(out string, img v1.Image, ref string) error {
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var compressed int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return err
		}
		compressed += n
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s (%s), %d layer, %.1f MB compressed, archive %.1f MB\n",
		out, ref, digest, len(layers), float64(compressed)/1e6, float64(fi.Size())/1e6)
	return nil
}
