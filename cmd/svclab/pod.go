package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
)

const podAbout = `
Changes one lab pod, as the things that happen to pods in a cluster would:

  --kill          its server stops, as a crashed container: the namespace stays,
                  nothing listens, and the pod stays in its EndpointSlices (no
                  probe has noticed yet), so connections sent there are refused
  --start         its server starts again
  --ready=false   its readiness fails: the EndpointSlices say ready: false,
                  serving: false, and proxies stop sending it new connections
  --ready=true    it is ready again
  --terminating   it is being deleted but still serves (a graceful shutdown):
                  ready: false, serving: true, terminating: true; proxies use such
                  endpoints only when a Service has no ready one

In the file-fed lab svclab writes the slices into the manifests file, which
svcproxy and clusterdns reload, and returns once svcproxy has applied it. In the control-plane lab (svclab up
--control-plane) --ready sets the Pod's Ready condition through the API server
and the EndpointSlice controller writes the slices; delete a pod there with
svclab kubectl delete pod NAME.`

// cmdPodControl is `svclab pod NAME --kill|--start|--ready=BOOL|--terminating`.
func cmdPodControl(ctx context.Context, cfg lab.Config, args []string) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: the lab's pods are network namespaces")
	}
	fs := newFlags(cfg, "svclab pod NAME --kill|--start|--ready=BOOL|--terminating", podAbout)
	kill := fs.Bool("kill", false, "stop the pod's server (a crash)")
	start := fs.Bool("start", false, "start the pod's server again")
	ready := fs.String("ready", "", "`true` or false: the pod's readiness")
	terminating := fs.Bool("terminating", false, "mark the pod's endpoints terminating, still serving")
	ns := fs.String("n", "default", "the pod's `NAMESPACE` (control-plane lab)")
	pos, err := parseAnyOrder(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1); err != nil {
		return err
	}
	name := pos[0]
	actions := 0
	for _, set := range []bool{*kill, *start, *ready != "", *terminating} {
		if set {
			actions++
		}
	}
	if actions != 1 {
		fs.Usage()
		return errors.New("want exactly one of --kill, --start, --ready=BOOL, --terminating")
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	switch {
	case *kill:
		if err := l.Pods().Kill(ctx, name); err != nil {
			return err
		}
		fmt.Fprintf(cfg.Stdout, "pod %s: killed; its endpoints stay in the slices, nothing answers there\n", name)
		return nil
	case *start:
		if err := l.Pods().Restart(ctx, name); err != nil {
			return err
		}
		fmt.Fprintf(cfg.Stdout, "pod %s: started\n", name)
		return nil
	}
	return podReadiness(ctx, cfg.Stdout, l, name, *ns, *ready, *terminating)
}

// podReadiness is `svclab pod NAME --ready=BOOL|--terminating`: through the
// API server on a control plane, in the manifests file's EndpointSlices in
// the file-fed lab.
func podReadiness(ctx context.Context, stdout io.Writer, l *lab.Lab, name, ns, ready string, terminating bool) error {
	cp, err := l.Cluster().HasControlPlane()
	if err != nil {
		return err
	}
	if cp {
		if terminating {
			return fmt.Errorf("the control-plane lab deletes pods through the API: svclab kubectl delete pod %s", name)
		}
		r, err := strconv.ParseBool(ready)
		if err != nil {
			return fmt.Errorf("--ready %q: want true or false", ready)
		}
		if err := l.Cluster().SetReady(ctx, ns, name, r); err != nil {
			return err
		}
		status := "False"
		if r {
			status = "True"
		}
		fmt.Fprintf(stdout, "pod %s/%s: Ready=%s\n", ns, name, status)
		return nil
	}
	var c cluster.Conditions
	switch {
	case terminating:
		c = cluster.Conditions{Serving: true, Terminating: true}
	default:
		r, err := strconv.ParseBool(ready)
		if err != nil {
			return fmt.Errorf("--ready %q: want true or false", ready)
		}
		c = cluster.Conditions{Ready: r, Serving: r}
	}
	n, changed, err := l.Cluster().SetPodConditions(ctx, name, c)
	if err != nil {
		return err
	}
	if changed == 0 {
		fmt.Fprintf(stdout, "pod %s: %s already, in %d EndpointSlices\n", name, c, n)
		return nil
	}
	fmt.Fprintf(stdout, "pod %s: %s, in %d EndpointSlices; svcproxy has applied it\n", name, c, n)
	return nil
}
