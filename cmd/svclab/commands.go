package main

// The commands that build the lab, change it and use it: up, exec,
// traffic, use, mode, down, demo, kubectl. Those that read the node's
// kernel are in inspect.go, pod's in pod.go, web's in web.go.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/demo"
	"github.com/svcproxy/svcproxy/lab/pods"
)

// imageDir is where `make image` wrote the image archives: the --bin
// directory, or svclab's own (bin/ of the repository).
func imageDir(cfg lab.Config) string {
	if cfg.BinDir != "" {
		return cfg.BinDir
	}
	self, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(self)
}

func cmdUp(ctx context.Context, cfg lab.Config, args []string) error {
	fs := flag.NewFlagSet("svclab up", flag.ContinueOnError)
	mode := fs.String("mode", "userspace", "svcproxy's `MODE`: userspace, iptables, nftables, ipvs, socklb or hybrid")
	withCP := fs.Bool("control-plane", false, "run etcd, kube-apiserver and kube-controller-manager in the node")
	withKubelet := fs.Bool("kubelet", false, "also run a real node: containerd, the kubelet and kube-scheduler, with svcproxy and clusterdns as pods (implies --control-plane)")
	nodes := fs.Int("nodes", 0, "a cluster of `N` nodes (1 to 3) made by kubeadm: a control-plane node and workers, kube-proxy (in --mode, default iptables) and CoreDNS as pods")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	opts := lab.UpOptions{Mode: *mode}
	if *nodes != 0 {
		if *withCP || *withKubelet {
			return errors.New("--nodes makes its own control plane and nodes: not with --control-plane or --kubelet")
		}
		if !flagSet(fs, "mode") {
			opts.Mode = "iptables" // kube-proxy's, as kubeadm writes it
		}
		progs, err := cluster.FindKubeadmPrograms(*kapiDir, imageDir(cfg), imageDir(cfg))
		if err != nil {
			return err
		}
		opts.Kubeadm, opts.Nodes = &progs, *nodes
		if err := l.UpWith(ctx, opts); err != nil {
			return err
		}
		return l.WriteHosts(cfg.Stdout)
	}
	if *withCP || *withKubelet {
		cp, err := cluster.FindControlPlane(*kapiDir)
		if err != nil {
			return err
		}
		opts.ControlPlane = &cp
	}
	if *withKubelet {
		rn, err := cluster.FindNodePrograms(*kapiDir, imageDir(cfg))
		if err != nil {
			return err
		}
		opts.RealNode = &rn
	}
	if err := l.UpWith(ctx, opts); err != nil {
		return err
	}
	return l.WriteHosts(cfg.Stdout)
}

func cmdExec(ctx context.Context, cfg lab.Config, args []string) error {
	if len(args) < 3 || args[1] != "--" {
		return errors.New("usage: svclab exec HOST -- CMD [ARGS...]")
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	err = l.Exec(ctx, args[0], args[2:], os.Stdin, cfg.Stdout, cfg.Stderr)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exitError{ee.ExitCode()}
	}
	return err
}

func cmdTraffic(ctx context.Context, cfg lab.Config, args []string) error {
	fs := flag.NewFlagSet("svclab traffic", flag.ContinueOnError)
	n := fs.Int("n", 30, "how many requests")
	rate := fs.Float64("rate", 0, "requests per second (0: each as soon as the last is answered)")
	from := fs.String("from", "client", "the lab `HOST` that sends")
	timeline := fs.Bool("timeline", false, "also show, per second, how many answers came through userspace and through the kernel")
	hold := fs.Bool("hold", false, "keep one more connection open from before the first request to after the last, and fail unless it survived (HTTP)")
	ipv6 := fs.Bool("ipv6", false, "resolve TARGET's name to its IPv6 address (AAAA), as curl -6 does")
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	t, err := l.Traffic(ctx, pods.TrafficOptions{Target: fs.Arg(0), N: *n, Rate: *rate, From: *from, Timeline: *timeline, Hold: *hold, IPv6: *ipv6})
	if err != nil {
		return err
	}
	if t.Failed > 0 {
		return fmt.Errorf("%d of %d requests failed", t.Failed, t.Total)
	}
	return nil
}

func cmdUse(ctx context.Context, cfg lab.Config, args []string) error {
	fs := flag.NewFlagSet("svclab use", flag.ContinueOnError)
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	kubeProxy := ""
	if fs.Arg(0) == "svcproxy" {
		// kube-proxy's cleanup runs in every node once svcproxy serves.
		if kubeProxy, err = cluster.FindKubeProxy(*kapiDir); err != nil {
			return err
		}
	}
	if err := l.Cluster().Use(ctx, fs.Arg(0), kubeProxy); err != nil {
		return err
	}
	proxy, dns, err := l.Cluster().Serving(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Stdout, "Services: %s (DaemonSet kube-system/kube-proxy); DNS: %s (Deployment kube-system/coredns)\n", proxy, dns)
	return nil
}

func cmdMode(ctx context.Context, cfg lab.Config, args []string) error {
	fs := flag.NewFlagSet("svclab mode", flag.ContinueOnError)
	sched := fs.String("ipvs-scheduler", "", "svcproxy's --ipvs-scheduler `NAME`: rr (default), wrr, lc, wlc, sh, dh, sed, nq")
	offload := fs.String("offload", "", "hybrid's kernel `PATH`, svcproxy's --offload: nftables (default), ipvs, iptables or socklb")
	demote := fs.Duration("demote-after", 0, "hybrid's --demote-after `DURATION`: how long a promoted port stays below the promotion rate before it returns to userspace (default 5m)")
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	args = fs.Args()
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	change, err := l.Cluster().Daemons().SetModeWith(ctx, cluster.ModeOptions{Mode: args[0], IPVSScheduler: *sched, Offload: *offload, DemoteAfter: *demote})
	if err != nil {
		return err
	}
	if change.Proxy != "" {
		// The kubeadm cluster: the ConfigMap, then new pods on every node,
		// deleted or rolled by a change of the DaemonSet's pod template.
		fmt.Fprintln(cfg.Stdout, change)
		return nil
	}
	// Ask what really runs: --mode ipvs on a kernel without IPVS runs iptables.
	running, err := l.Cluster().Daemons().NodeGet(ctx, "/proxyMode")
	running = strings.TrimSpace(running)
	switch {
	case err != nil:
		fmt.Fprintf(cfg.Stdout, "svcproxy restarted with --mode %s\n", args[0])
	case running == args[0]:
		fmt.Fprintf(cfg.Stdout, "svcproxy restarted in %s mode\n", running)
	default:
		fmt.Fprintf(cfg.Stdout, "svcproxy restarted with --mode %s; it runs %s mode (see its log for why)\n", args[0], running)
	}
	return nil
}

func cmdDown(ctx context.Context, cfg lab.Config, args []string) error {
	if err := parse(flag.NewFlagSet("svclab down", flag.ContinueOnError), args, 0); err != nil {
		return err
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	return l.Down(ctx)
}

func cmdDemo(ctx context.Context, cfg lab.Config, args []string) error {
	fs := flag.NewFlagSet("svclab demo", flag.ContinueOnError)
	withCP := fs.String("control-plane", "auto", "run the demo on a control plane: true, false, or auto (when its programs are built)")
	var opts demo.Options
	fs.StringVar(&opts.Only, "only", "", "only the steps whose title has `WORD` (and the lab's build and removal): --only ipvs")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	switch *withCP {
	case "auto", "true", "false":
	default:
		return fmt.Errorf("--control-plane %q: want auto, true or false", *withCP)
	}
	if *withCP != "false" {
		cp, err := cluster.FindControlPlane(*kapiDir)
		switch {
		case err == nil:
			opts.ControlPlane = &cp
		case *withCP == "true":
			return err
		default:
			fmt.Fprintf(cfg.Stdout, "(The control plane's programs are not built, so this demo feeds the lab from a\nmanifests file instead; `make kapi` builds them, once per machine.)\n\n")
		}
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	return demo.Run(ctx, l, opts)
}

func cmdKubectl(ctx context.Context, cfg lab.Config, args []string) error {
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	err = l.Cluster().Kubectl(ctx, os.Stdin, cfg.Stdout, cfg.Stderr, args...)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exitError{ee.ExitCode()}
	}
	return err
}
