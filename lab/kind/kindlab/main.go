// Command kindlab brings kind's cluster up and down (lab/kind), from the
// repository's root, as `make kind-up` and `make kind-down` run it:
//
//	go run ./lab/kind/kindlab up      # engine, node image, kind create, deploy/kind, check
//	go run ./lab/kind/kindlab check   # a Service and a name from a pod on each worker
//	go run ./lab/kind/kindlab kubectl -n kube-system get pods -o wide
//	go run ./lab/kind/kindlab down    # kind delete cluster, the engine stopped, nothing left
//
// up needs root, `make build kind-bin image e2e-images kind-image` first
// (make kind-up does them); the programs come from test/kapi's cache.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/internal/k8sbin"
	"github.com/svcproxy/svcproxy/lab/kind"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kindlab up|check|down|kubectl ARGS...")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "kindlab:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, verb string, args []string) error {
	bins, err := k8sbin.Build(ctx, k8sbin.Config{Log: os.Stderr, ControlPlane: true, Kind: true, CachedOnly: verb != "up"})
	if err != nil {
		return err
	}
	runc, err := filepath.Abs("bin/runc-capbound")
	if err != nil {
		return err
	}
	c := kind.New(kind.Config{
		Kind: bins.Kind, Kubectl: bins.Kubectl, Runc: runc,
		NodeImage: "bin/kind-node.tar", SvcproxyImage: "bin/svcproxy-image.tar",
		Log: os.Stderr,
	})
	start := time.Now()
	switch verb {
	case "up":
		if err := c.Up(ctx); err != nil {
			return fmt.Errorf("%w\n(what was made is left for a look: make kind-down removes it)", err)
		}
		fmt.Printf("kind-up: cluster %q up in %s; kubectl: go run ./lab/kind/kindlab kubectl ARGS (KUBECONFIG %s, in the engine's network namespace %s)\n",
			kind.ClusterName, time.Since(start).Round(100*time.Millisecond), c.Kubeconfig(), kind.EngineName)
		return check(ctx, c)
	case "check":
		return check(ctx, c)
	case "kubectl":
		out, err := c.Kubectl(ctx, os.Stdin, args...)
		fmt.Print(out)
		return err
	case "down":
		if err := c.Down(ctx); err != nil {
			return err
		}
		fmt.Printf("kind-down: done in %s\n", time.Since(start).Round(100*time.Millisecond))
		return nil
	}
	return fmt.Errorf("unknown verb %q: up, check, down or kubectl", verb)
}

func check(ctx context.Context, c *kind.Cluster) error {
	start := time.Now()
	lines, err := c.Check(ctx, "bin/e2e-images/agnhost.tar", images.AgnhostRef)
	if err != nil {
		return err
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Printf("kind-check: %d workers in %s\n", len(lines), time.Since(start).Round(100*time.Millisecond))
	return nil
}
