package exercise

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/svcproxy/svcproxy/lab/views"
)

// KernelLab is a lab whose node a check reads beyond svcproxy's /status:
// the conntrack table, a packet traced through the live rules, a command
// run in a lab host (nft, iptables-save, getent), a process's log. lab.Lab
// is one.
type KernelLab interface {
	Lab
	ConntrackReport(ctx context.Context, opts views.ConntrackOptions) (*views.ConntrackView, error)
	TraceReport(ctx context.Context, opts views.TraceOptions) (*views.TraceReport, error)
	Exec(ctx context.Context, host string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error
	// LogPath is the log of a process the lab started ("clusterdns").
	LogPath(name string) string
}

// kernel is a check that reads the node's kernel or hosts too.
func kernel(f func(context.Context, KernelLab) (Result, error)) checkFunc {
	return func(ctx context.Context, l Lab) (Result, error) {
		k, ok := l.(KernelLab)
		if !ok {
			return Result{}, fmt.Errorf("this check reads the node's kernel and hosts, which %T cannot", l)
		}
		return f(ctx, k)
	}
}

// output runs argv in host and returns its standard output.
func output(ctx context.Context, l KernelLab, host string, argv ...string) (string, error) {
	var out, errb bytes.Buffer
	if err := l.Exec(ctx, host, argv, nil, &out, &errb); err != nil {
		return out.String(), fmt.Errorf("%s in %s: %w: %s", strings.Join(argv, " "), host, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}
