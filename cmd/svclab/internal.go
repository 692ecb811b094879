package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/lab"
)

// cmdPod is a lab pod's server: `svclab pod --name web-0 --tcp 8080 --udp 8080`.
// With --ready-fd it writes "ready" to that descriptor once it listens.
func cmdPod(ctx context.Context, _ lab.Config, args []string) error {
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
	p := &lab.Pod{Name: *name}
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
// writes one JSON line per event (lab.Event) for svclab outside to tally.
func cmdProbe(ctx context.Context, cfg lab.Config, args []string) error {
	fs := flag.NewFlagSet("svclab probe", flag.ContinueOnError)
	n := fs.Int("n", 30, "how many requests")
	rate := fs.Float64("rate", 0, "requests per second (0: back to back)")
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	t, err := lab.ParseTarget(fs.Arg(0))
	if err != nil {
		return err
	}
	p := &lab.Probe{Target: t, N: *n, Rate: *rate}
	return p.Run(ctx, cfg.Stdout)
}
