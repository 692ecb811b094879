package demo

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/pods"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// Options say which demo runs.
type Options struct {
	// ControlPlane, when not nil, is what the demo runs the lab on; nil is
	// the file-fed lab.
	ControlPlane *cluster.ControlPlane
	// Only, when not "", narrows the demo to the steps whose title contains
	// it (case-insensitive), between the first (build) and the last (down).
	Only string
}

// step is one stop of the demo: why it matters, then commands whose output
// the student sees, then a check of what they should have seen. Its words
// are a text file of its own (text/NN-name.txt); run is the code.
type step struct {
	title string
	why   string
	// run shows and runs the step's commands; its error says what was not as
	// expected.
	run func(ctx context.Context) error
	ok  string // what the step showed, when it did
	// timeout bounds the step; 0 is stepTimeout.
	timeout time.Duration
}

// texts are the steps' words, and the demo's introduction.
//
//go:embed text/*.txt
var texts embed.FS

// newStep is the step whose words are text/name.txt: its title, a blank
// line, why it matters, a blank line, and "ok: " and what it showed.
func newStep(name string, run func(context.Context) error) step {
	b, err := texts.ReadFile("text/" + name + ".txt")
	if err != nil {
		panic(fmt.Sprintf("demo step %s: %v", name, err))
	}
	title, rest, ok1 := strings.Cut(string(b), "\n\n")
	why, ok, ok2 := strings.Cut(rest, "\nok: ")
	if !ok1 || !ok2 {
		panic(fmt.Sprintf("demo step %s: want a title, a blank line, why, a blank line, and \"ok: \"", name))
	}
	return step{title: title, why: why, ok: strings.TrimSuffix(ok, "\n"), run: run}
}

// demo is the narrated walk's running state.
type demo struct {
	l    *lab.Lab
	cp   *cluster.ControlPlane
	plan *topology.Plan
	out  io.Writer
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
	err := d.l.Net().Exec(ctx, host, argv, nil, w, w)
	return buf.String(), err
}

// traffic shows and runs `svclab traffic`.
func (d *demo) traffic(ctx context.Context, n int, target string) (*pods.Tally, error) {
	d.cmd(fmt.Sprintf("svclab traffic --n %d %s", n, target))
	return d.l.Pods().Traffic(ctx, pods.TrafficOptions{Target: target, N: n})
}

// traffic6 shows and runs `svclab traffic --ipv6`: the target's name
// resolved to its IPv6 ClusterIP.
func (d *demo) traffic6(ctx context.Context, n int, target string) (*pods.Tally, error) {
	d.cmd(fmt.Sprintf("svclab traffic --ipv6 --n %d %s", n, target))
	return d.l.Pods().Traffic(ctx, pods.TrafficOptions{Target: target, N: n, IPv6: true})
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

// Run builds the lab, walks through it step by step, and takes it down
// again, also when a step fails or ctx ends. It returns an error naming every
// step that did not see what it expected.
func Run(ctx context.Context, l *lab.Lab, opts Options) (err error) {
	for _, tool := range lab.DemoTools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("svclab demo needs %s on PATH (Debian: make deps)", tool)
		}
	}
	d := &demo{l: l, cp: opts.ControlPlane, plan: l.Plan(), out: l.Stdout()}
	start := time.Now()
	intro, _ := texts.ReadFile("text/00-intro.txt")
	fmt.Fprint(d.out, string(intro))
	steps := only(d.steps(), opts.Only)
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
		serr := d.run(ctx, s)
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

// run runs one step within its timeout.
func (d *demo) run(ctx context.Context, s step) error {
	timeout := s.timeout
	if timeout == 0 {
		timeout = topology.Patient(stepTimeout)
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d.ok = ""
	return s.run(sctx)
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

// expectPods checks that a tally has no failures and its answers came from
// exactly the pods named.
func expectPods(t *pods.Tally, want ...string) error {
	if t.Failed > 0 {
		return fmt.Errorf("%d of %d requests failed: %s", t.Failed, t.Total, strings.Join(t.Errors, "; "))
	}
	var got []string
	for _, p := range t.Pods {
		got = append(got, p.Pod)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return fmt.Errorf("answers came from [%s], want [%s]", strings.Join(got, " "), strings.Join(want, " "))
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
