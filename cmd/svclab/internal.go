package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/pods"
)

// cmdPod is two commands: `svclab pod NAME --kill|--start|--ready=BOOL|
// --terminating` changes a lab pod (pod.go); `svclab pod --name NAME ...` is
// a pod's server.
func cmdPod(ctx context.Context, cfg lab.Config, args []string) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return cmdPodControl(ctx, cfg, args)
	}
	return cmdPodServer(ctx, args)
}

// cmdKubelet is the control-plane lab's kubelet, run by `svclab up
// --control-plane` until the lab goes down.
func cmdKubelet(ctx context.Context, cfg lab.Config, args []string) error {
	if err := parse(flag.NewFlagSet("svclab kubelet", flag.ContinueOnError), args, 0); err != nil {
		return err
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	c, err := l.Cluster().Client()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(cfg.Stderr, nil))
	return cluster.NewSimulatedKubelet(cluster.SimulatedKubeletConfig{Net: l.Net(), Pods: l.Pods(), Client: c, Log: log}).Run(ctx)
}

// cmdPodServer is a lab pod's server: `svclab pod --name web-0 --tcp 8080 --udp 8080`.
// With --ready-fd it writes "ready" to that descriptor once it listens.
func cmdPodServer(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("svclab pod", flag.ContinueOnError)
	name := fs.String("name", "", "the pod's `NAME`, in every answer")
	tcp := fs.String("tcp", "", "HTTP `PORTS`, comma-separated")
	udp := fs.String("udp", "", "UDP `PORTS`, comma-separated")
	readyFD := fs.Int("ready-fd", 0, "write \"ready\" to this file descriptor once listening (0: none)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *name == "" {
		return fmt.Errorf("--name: required")
	}
	p := &pods.Pod{Name: *name}
	var err error
	if p.TCP, err = ports("--tcp", *tcp); err != nil {
		return err
	}
	if p.UDP, err = ports("--udp", *udp); err != nil {
		return err
	}
	if *readyFD > 0 {
		f := os.NewFile(uintptr(*readyFD), "ready")
		p.Ready = func() {
			fmt.Fprintln(f, "ready")
			f.Close()
		}
	}
	return p.Serve(ctx)
}

func ports(flagName, s string) ([]uint16, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint16
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%s %q: want port numbers 1 to 65535, comma-separated", flagName, s)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// cmdProbe sends the requests of `svclab traffic` from inside a lab host and
// writes one JSON line per event (pods.Event) for svclab outside to tally.
func cmdProbe(ctx context.Context, cfg lab.Config, args []string) error {
	fs := flag.NewFlagSet("svclab probe", flag.ContinueOnError)
	n := fs.Int("n", 30, "how many requests")
	rate := fs.Float64("rate", 0, "requests per second (0: back to back)")
	hold := fs.Bool("hold", false, "keep one more connection open, used before the first request and after the last")
	ipv6 := fs.Bool("ipv6", false, "resolve a name to its IPv6 address (AAAA) instead of its IPv4 one (A)")
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	t, err := pods.ParseTarget(fs.Arg(0))
	if err != nil {
		return err
	}
	p := &pods.Probe{Target: t, N: *n, Rate: *rate, Hold: *hold, IPv6: *ipv6}
	return p.Run(ctx, cfg.Stdout)
}
