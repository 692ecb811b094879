package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/lab/pods"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// step is one stop of the demo: why it matters, then commands whose output
// the student sees, then a check of what they should have seen.
type step struct {
	title string
	why   string
	// run shows and runs the step's commands; its error says what was not as
	// expected.
	run func(ctx context.Context, d *demo) error
	ok  string // what the step showed, when it did
	// timeout bounds the step; 0 is stepTimeout.
	timeout time.Duration
}

// demo is the narrated walk's running state.
type demo struct {
	l   *Lab
	out io.Writer
	// ok, when a step's run sets it, replaces the step's ok line: for a step
	// whose outcome depends on the kernel (IPVS or the fallback).
	ok string
}

// cmd prints a command line as the student would type it.
func (d *demo) cmd(line string) { fmt.Fprintf(d.out, "\n$ %s\n", line) }

// exec shows and runs `svclab exec HOST -- argv...`, returning its output.
func (d *demo) exec(ctx context.Context, host string, argv ...string) (string, error) {
	d.cmd("svclab exec " + host + " -- " + strings.Join(argv, " "))
	var buf strings.Builder
	w := io.MultiWriter(d.out, &buf)
	err := d.l.net.Exec(ctx, host, argv, nil, w, w)
	return buf.String(), err
}

// traffic shows and runs `svclab traffic`.
func (d *demo) traffic(ctx context.Context, n int, target string) (*pods.Tally, error) {
	d.cmd(fmt.Sprintf("svclab traffic --n %d %s", n, target))
	return d.l.Traffic(ctx, TrafficOptions{Target: target, N: n})
}

// traffic6 shows and runs `svclab traffic --ipv6`: the target's name
// resolved to its IPv6 ClusterIP.
func (d *demo) traffic6(ctx context.Context, n int, target string) (*pods.Tally, error) {
	d.cmd(fmt.Sprintf("svclab traffic --ipv6 --n %d %s", n, target))
	return d.l.Traffic(ctx, TrafficOptions{Target: target, N: n, IPv6: true})
}

// shell quotes an IPv6 host:port for the command lines the demo shows: sh
// would take the brackets for a pattern.
func shell(target string) string {
	if strings.Contains(target, "[") {
		return "'" + target + "'"
	}
	return target
}

// stepTimeout bounds one step: a healthy step takes a few seconds, and a
// broken lab (DNS timing out, say) must not keep `make lab` for minutes.
const stepTimeout = 40 * time.Second

// DemoTools are the programs the demo runs besides svclab, svcproxy and clusterdns.
var DemoTools = []string{"ip", "iptables-save", "dig", "curl"}

// Demo builds the lab, walks through it step by step, and takes it down
// again, also when a step fails or ctx ends. It returns an error naming every
// step that did not see what it expected.
func (l *Lab) Demo(ctx context.Context) (err error) {
	for _, tool := range DemoTools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("svclab demo needs %s on PATH (Debian: make deps)", tool)
		}
	}
	l.inDemo = true
	d := &demo{l: l, out: l.cfg.Stdout}
	start := time.Now()
	fmt.Fprint(d.out, demoIntro)
	steps := only(l.demoSteps(), l.cfg.DemoOnly)
	var failed []string
	defer func() {
		// Down runs whatever happened, with a context of its own: an
		// interrupted demo must still clean up.
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if derr := l.Down(dctx); derr != nil {
			err = errors.Join(err, fmt.Errorf("svclab down: %w", derr))
		}
	}()
	for i, s := range steps {
		fmt.Fprintf(d.out, "\n## %d. %s\n\n%s", i+1, s.title, s.why)
		timeout := s.timeout
		if timeout == 0 {
			timeout = topology.Patient(stepTimeout)
		}
		sctx, cancel := context.WithTimeout(ctx, timeout)
		d.ok = ""
		serr := s.run(sctx, d)
		cancel()
		if ctx.Err() != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, s.title, ctx.Err())
		}
		if serr != nil {
			fmt.Fprintf(d.out, "\nFAILED: %v\n", serr)
			failed = append(failed, fmt.Sprintf("%d (%s)", i+1, s.title))
			if i == 0 { // without a lab, no other step can run
				break
			}
			continue
		}
		ok := s.ok
		if d.ok != "" {
			ok = d.ok
		}
		fmt.Fprintf(d.out, "\nok: %s\n", ok)
	}
	if len(failed) > 0 {
		fmt.Fprintf(d.out, "\n%d of %d steps failed (%s).\n", len(failed), len(steps), time.Since(start).Round(time.Second))
		return fmt.Errorf("%d of %d steps failed: %s", len(failed), len(steps), strings.Join(failed, "; "))
	}
	fmt.Fprintf(d.out, "\nAll %d steps saw what they expected (%s).\n", len(steps), time.Since(start).Round(time.Second))
	return nil
}

// only keeps the first step (the lab's build), the last (its removal) and those
// between whose title contains word, case-insensitive; all of them when word is "".
func only(steps []step, word string) []step {
	if word == "" {
		return steps
	}
	word = strings.ToLower(word)
	kept := []step{steps[0]}
	for _, s := range steps[1 : len(steps)-1] {
		if strings.Contains(strings.ToLower(s.title), word) {
			kept = append(kept, s)
		}
	}
	return append(kept, steps[len(steps)-1])
}

const demoIntro = `svclab demo: a Kubernetes Service, from a name to a pod, on one machine.

A Service is a name and a virtual IP address in front of a set of pods. Nothing
listens on that address: the node's service proxy (kube-proxy; here svcproxy)
catches packets sent to it and passes them to a pod, and the cluster DNS
(CoreDNS; here clusterdns) turns the name into the address. This demo builds a
one-node cluster out of network namespaces and follows a request through it.
`

// expectPods checks that a tally has no failures and its answers came from
// exactly the pods named.
func expectPods(t *pods.Tally, pods ...string) error {
	if t.Failed > 0 {
		return fmt.Errorf("%d of %d requests failed: %s", t.Failed, t.Total, strings.Join(t.Errors, "; "))
	}
	var got []string
	for _, p := range t.Pods {
		got = append(got, p.Pod)
	}
	if strings.Join(got, ",") != strings.Join(pods, ",") {
		return fmt.Errorf("answers came from [%s], want [%s]", strings.Join(got, " "), strings.Join(pods, " "))
	}
	return nil
}

// expectSources checks that the pods saw only the given client addresses.
func expectSources(t *pods.Tally, names map[netip.Addr]string, want ...netip.Addr) error {
	got := t.Sources()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("pods saw clients %v, want %v (%s)", got, want, names[want[0]])
	}
	return nil
}

// expectLines checks that out has every one of want.
func expectLines(out string, want ...string) error {
	var missing []string
	for _, w := range want {
		if !strings.Contains(out, w) {
			missing = append(missing, fmt.Sprintf("%q", w))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("output lacks %s", strings.Join(missing, ", "))
	}
	return nil
}
