// Command mkimages writes the container images Kubernetes' e2e tests run
// (package images) as archives for `ctr -n k8s.io images import`, one per
// image (`make e2e-images` runs it from the repository's root):
//
//	go run ./images/mkimages -o bin/e2e-images
//	bin/e2e-images/pause.tar: registry.k8s.io/pause:3.10.2, 1.1 MB
//	...
//
// It builds pause (./images/pause) static; agnhost comes from the
// cache of test/kapi (`make conformance-bins`) unless -agnhost names one.
// Without agnhost, the images that need it are skipped, and it says so.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/internal/k8sbin"
)

func main() {
	out := flag.String("o", "bin/e2e-images", "write the archives into `DIR`")
	agnhost := flag.String("agnhost", "", "a static agnhost `FILE`; default: test/kapi's cached one")
	only := flag.String("only", "", "comma-separated archive names to write (pause,busybox,...); default: all")
	flag.Parse()
	if err := run(*out, *agnhost, *only); err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		os.Exit(1)
	}
}

func run(out, agnhost, only string) error {
	tmp, err := os.MkdirTemp("", "svcproxy-mkimages-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bins, err := image.BuildBinaries(tmp, "images/pause")
	if err != nil {
		return err
	}
	cfg := images.Config{Pause: bins["pause"], Agnhost: agnhost}
	if cfg.Agnhost == "" {
		b, err := k8sbin.Build(context.Background(), k8sbin.Config{Conformance: true, CachedOnly: true})
		if err != nil {
			fmt.Fprintf(os.Stderr, "mkimages: no agnhost (%v): run `make conformance-bins` first, or pass -agnhost\n", err)
		}
		cfg.Agnhost = b.Agnhost
	}
	var specs []images.Spec
	for _, s := range images.All() {
		if only != "" && !strings.Contains(","+only+",", ","+strings.TrimSuffix(s.File, ".tar")+",") {
			continue
		}
		if s.Needs == "agnhost" && cfg.Agnhost == "" {
			fmt.Fprintf(os.Stderr, "mkimages: skipped %s: it needs agnhost\n", s.Ref)
			continue
		}
		specs = append(specs, s)
	}
	files, err := images.Write(out, cfg, specs)
	for i, f := range files {
		fi, serr := os.Stat(f)
		if serr != nil {
			return serr
		}
		fmt.Printf("%s: %s, %.1f MB\n", f, specs[i].Ref, float64(fi.Size())/1e6)
	}
	return err
}
