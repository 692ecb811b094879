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
(exit status 1). It reads what the lab holds now: what svcproxy serves (its
mode, each port's path and endpoints) and, for some tutorials, the node's
conntrack table, its rules, the questions a host's resolver asks, the node's
IPVS, the API server or each node's proxy. So any way of doing the task
passes.

tutorials with an exercise: ` + strings.Join(exerciseNumbers(), ", ")

// The lab is every kind of lab a check reads.
var (
	_ exercise.KernelLab  = (*lab.Lab)(nil)
	_ exercise.IPVSLab    = (*lab.Lab)(nil)
	_ exercise.ClusterLab = (*lab.Lab)(nil)
)

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
