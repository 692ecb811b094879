package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/exercise"
)

var checkAbout = `Check the exercise at the end of tutorial NN on the lab as it is now:
"ok" with what the lab shows, or "not yet", what is still missing and a hint
(exit status 1). It reads what svcproxy serves (its mode, each port's path
and endpoints) and, for some tutorials, the node's conntrack table, its
rules, or the questions a host's resolver asks. So any way of doing the task
passes.

tutorials with an exercise: ` + strings.Join(exerciseNumbers(), ", ")

func exerciseNumbers() []string {
	var n []string
	for _, e := range exercise.Exercises {
		n = append(n, e.Tutorial)
	}
	return n
}

func cmdCheck(ctx context.Context, cfg lab.Config, args []string) error {
	fs := newFlags(cfg, "svclab check NN", checkAbout)
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	e, err := exercise.Find(fs.Arg(0))
	if err != nil {
		return err
	}
	// What the views print as they read (a trace's walk) is not the
	// check's answer: only the lines below are.
	quiet := cfg
	quiet.Stdout = io.Discard
	l, err := lab.New(quiet)
	if err != nil {
		return err
	}
	r, err := e.Check(ctx, l)
	if err != nil {
		return err
	}
	out := cfg.Stdout
	fmt.Fprintf(out, "exercise %s: %s\n", e.Tutorial, e.Task)
	if r.Done {
		fmt.Fprintf(out, "ok: %s\n", r.Saw)
		return nil
	}
	fmt.Fprintf(out, "not yet: %s\nhint: %s\n", r.Saw, r.Hint)
	return exitError{1}
}

// lab.Lab is what every check reads.
var _ exercise.KernelLab = (*lab.Lab)(nil)
