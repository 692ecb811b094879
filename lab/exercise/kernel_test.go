package exercise

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/lab/views"
)

// kernelLab is a fake KernelLab: its Services, conntrack entries and trace
// as given, and what each command prints (by "host argv...").
type kernelLab struct {
	fakeLab
	entries []views.ConntrackEntry
	trace   views.TraceReport
	out     map[string]string
	// onExec, when set, runs before a command prints: what the command
	// does to the lab (getent makes clusterdns log its questions).
	onExec func(cmd string)
	logDir string
}

func (k kernelLab) ConntrackReport(_ context.Context, opts views.ConntrackOptions) (*views.ConntrackView, error) {
	return &views.ConntrackView{Service: opts.Service, Mode: k.v.Mode, Entries: k.entries}, nil
}

func (k kernelLab) TraceReport(context.Context, views.TraceOptions) (*views.TraceReport, error) {
	return &k.trace, nil
}

func (k kernelLab) Exec(_ context.Context, host string, argv []string, _ io.Reader, stdout, _ io.Writer) error {
	cmd := host + " " + strings.Join(argv, " ")
	if k.onExec != nil {
		k.onExec(cmd)
	}
	out, ok := k.out[cmd]
	if !ok {
		return errors.New("exit status 2")
	}
	_, err := io.WriteString(stdout, out)
	return err
}

func (k kernelLab) LogPath(name string) string { return filepath.Join(k.logDir, name+".log") }

func check(t *testing.T, tutorial string, l Lab) Result {
	t.Helper()
	e, err := Find(tutorial)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Check(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	if r.Saw == "" || r.Done != (r.Hint == "") {
		t.Errorf("tutorial %s: %+v: want what it saw, and a hint when not done", tutorial, r)
	}
	return r
}

func want(t *testing.T, what string, r Result, done bool, hint string) {
	t.Helper()
	if r.Done != done || !strings.Contains(r.Hint, hint) {
		t.Errorf("%s: %+v; want done %v with a hint containing %q", what, r, done, hint)
	}
}

// A Lab that reads only Services cannot run the checks that read more: an
// error, not a "not yet".
func TestKernelCheckNeedsKernelLab(t *testing.T) {
	e, err := Find("02")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Check(t.Context(), lab("iptables", "ready", "iptables")); err == nil {
		t.Error("exercise 02 checked a lab without a kernel to read")
	}
}
