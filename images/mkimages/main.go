// Command mkimages writes container images as archives for `ctr -n k8s.io
// images import`, one per image (package images): by default those
// Kubernetes' e2e tests run (`make e2e-images`), with -kubeadm those a
// cluster made by kubeadm v1.37.2 runs (`make kubeadm-images`). It runs from
// the repository's root:
//
//	go run ./images/mkimages -o bin/e2e-images
//	bin/e2e-images/pause.tar: registry.k8s.io/pause:3.10.2, 0.7 MB
//	...
//	go run ./images/mkimages -kubeadm -o bin/kubeadm-images
//	bin/kubeadm-images/kube-proxy.tar: registry.k8s.io/kube-proxy:v1.37.2, 49.7 MB
//	...
//
// It builds pause (./images/pause) static; the other programs come from the
// cache of test/kapi: agnhost (`make conformance-bins`), kubeadm's (`make
// cluster-bins`), unless -program NAME=FILE names one (agnhost, kube-proxy,
// coredns, etcd, ...). An image whose programs are not built is skipped, and
// it says so.
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
	kubeadm := flag.Bool("kubeadm", false, "kubeadm's images (kube-apiserver, etcd, kube-proxy, coredns, ...) instead of the e2e tests'")
	agnhost := flag.String("agnhost", "", "a static agnhost `FILE` (the same as -program agnhost=FILE)")
	only := flag.String("only", "", "comma-separated archive names to write (pause,busybox,...); default: all")
	programs := map[string]string{}
	flag.Func("program", "`NAME=FILE`: the program NAME (kube-proxy, coredns, etcd, ...) is FILE, not test/kapi's cached one; repeatable", func(v string) error {
		name, file, ok := strings.Cut(v, "=")
		if !ok || name == "" || file == "" {
			return fmt.Errorf("want NAME=FILE, got %q", v)
		}
		programs[name] = file
		return nil
	})
	flag.Parse()
	if *agnhost != "" {
		programs["agnhost"] = *agnhost
	}
	if err := run(*out, *kubeadm, programs, *only); err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		os.Exit(1)
	}
}

func run(out string, kubeadm bool, programs map[string]string, only string) error {
	specs := images.All()
	if kubeadm {
		specs = images.Kubeadm()
	}
	var chosen []images.Spec
	for _, s := range specs {
		if only == "" || strings.Contains(","+only+",", ","+strings.TrimSuffix(s.File, ".tar")+",") {
			chosen = append(chosen, s)
		}
	}
	tmp, err := os.MkdirTemp("", "svcproxy-mkimages-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bins, err := image.BuildBinaries(tmp, "images/pause")
	if err != nil {
		return err
	}
	cfg := images.Config{Pause: bins["pause"]}
	for name, file := range programs {
		if err := cfg.SetProgram(name, file); err != nil {
			return err
		}
	}
	fromCache(&cfg, chosen)
	var ready []images.Spec
	for _, s := range chosen {
		if missing := cfg.Missing(s); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "mkimages: skipped %s: it needs %s\n", s.Ref, strings.Join(missing, ", "))
			continue
		}
		ready = append(ready, s)
	}
	files, err := images.Write(out, cfg, ready)
	for i, f := range files {
		fi, serr := os.Stat(f)
		if serr != nil {
			return serr
		}
		fmt.Printf("%s: %s, %.1f MB\n", f, ready[i].Ref, float64(fi.Size())/1e6)
	}
	return err
}

// cached says where test/kapi's cache keeps each program: which set to ask
// internal/k8sbin for, which field holds it, which make target builds it.
var cached = map[string]struct {
	set    k8sbin.Config
	field  func(k8sbin.Binaries) string
	target string
}{
	"agnhost":                 {k8sbin.Config{Conformance: true}, func(b k8sbin.Binaries) string { return b.Agnhost }, "conformance-bins"},
	"kube-apiserver":          {k8sbin.Config{}, func(b k8sbin.Binaries) string { return b.APIServer }, "kapi"},
	"kube-controller-manager": {k8sbin.Config{ControlPlane: true}, func(b k8sbin.Binaries) string { return b.ControllerManager }, "kapi"},
	"kube-scheduler":          {k8sbin.Config{Node: true}, func(b k8sbin.Binaries) string { return b.Scheduler }, "node-bins"},
	"kube-proxy":              {k8sbin.Config{KubeProxy: true}, func(b k8sbin.Binaries) string { return b.KubeProxy }, "cluster-bins"},
	"coredns":                 {k8sbin.Config{CoreDNS: true}, func(b k8sbin.Binaries) string { return b.CoreDNS }, "cluster-bins"},
	"etcd":                    {k8sbin.Config{Cluster: true}, func(b k8sbin.Binaries) string { return b.ClusterEtcd }, "cluster-bins"},
	"etcdctl":                 {k8sbin.Config{Cluster: true}, func(b k8sbin.Binaries) string { return b.ClusterEtcdctl }, "cluster-bins"},
}

// fromCache fills in, from test/kapi's cache, each program the specs need
// that cfg does not name yet, and says which are not built.
func fromCache(cfg *images.Config, specs []images.Spec) {
	for _, s := range specs {
		for _, name := range cfg.Missing(s) {
			c, ok := cached[name]
			if !ok {
				continue
			}
			set := c.set
			set.CachedOnly = true
			b, err := k8sbin.Build(context.Background(), set)
			if err != nil {
				fmt.Fprintf(os.Stderr, "mkimages: no %s (%v): run `make %s` first\n", name, err, c.target)
				continue
			}
			cfg.SetProgram(name, c.field(b))
		}
	}
}
