package lab

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/tutorial"
	"github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
)

// tutorials is where the course lives, from this package's directory.
var tutorials = filepath.Join("..", "..", "tutorials")

// tutorialOut, when set, is a directory where TestTutorials also writes
// each command's output, one file per command (05-session-affinity.md:42):
// what a writer compares a tutorial's blocks with, line by line.
var tutorialOut = flag.String("tutorial-out", "", "TestTutorials: also write each command's output to DIR/TUTORIAL:LINE")

// commandTimeout bounds one tutorial command: the longest, svclab up
// --nodes 3, takes a minute or two, more on a busy machine; the others
// seconds.
const commandTimeout = 10 * time.Minute

// TestTutorials runs every tutorial (tutorials/NN-topic.md) as a learner
// would, each against a fresh lab: its svclab commands, in order, through
// sh with the built binaries first on PATH, each one's exit status (zero, or
// non-zero for a command marked "# fails") and output checked against what
// the tutorial shows (internal/tutorial says how). A tutorial
// without svclab commands is skipped; one that needs IPVS runs only on a
// kernel with IPVS (test/vm has one); one that needs a kubelet runs once
// `make node-bins` has built it. One tutorial:
//
//	go test ./test/lab -run 'TestTutorials/05'
func TestTutorials(t *testing.T) {
	netnstest.RequireRoot(t, lab.DemoTools...)
	files, err := tutorial.Files(tutorials)
	if err != nil {
		t.Fatal(err)
	}
	bin := build(t)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			tut, err := tutorial.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if len(tut.Commands) == 0 {
				t.Skip("no svclab commands")
			}
			for _, need := range tut.Needs {
				switch need {
				case "ipvs":
					if err := ipvs.Available(); err != nil {
						t.Skipf("needs IPVS, which this kernel lacks (test/vm runs it): %v", err)
					}
				case "kubelet":
					// A real node: its programs (or a skip naming
					// `make node-bins`) and its images next to svclab.
					netnstest.RequireRoot(t, cluster.NodeTools...)
					kapitest.NodeBinaries(t)
					buildImages(t, bin, images.Config{}, images.All()[:1])
				case "kubeadm":
					// The kubeadm cluster: its programs and kubeadm's
					// images, and agnhost's image for its web servers
					// (or a skip naming what builds them).
					netnstest.RequireRoot(t, cluster.NodeTools...)
					kapitest.ClusterBinaries(t)
					conf := kapitest.ConformanceBinaries(t)
					buildImages(t, bin, images.Config{Agnhost: conf.Agnhost}, []images.Spec{images.All()[0], agnhostSpec()})
					buildKubeadmImages(t, bin)
				}
			}
			runTutorial(t, bin, file, tut)
		})
	}
}

// runTutorial runs tut's commands on a fresh lab and removes the lab after.
func runTutorial(t *testing.T, bin, file string, tut *tutorial.Tutorial) {
	t.Helper()
	down(t, bin) // whatever an earlier tutorial or a crashed run left
	t.Cleanup(func() {
		down(t, bin)
		requireClean(t, bin)
	})
	if slices.Contains(tut.Needs, "kubeadm") {
		// Cleanups run last first: this one before the lab goes down.
		t.Cleanup(func() {
			if t.Failed() {
				logClusterState(t, bin)
			}
		})
	}
	cmds := tut.Commands
	if !strings.HasPrefix(cmds[0].Text+" ", "svclab up ") {
		cmds = append([]tutorial.Command{{Text: "svclab up"}}, cmds...)
	}
	for _, c := range cmds {
		out, err := shell(bin, c.Text)
		t.Logf("%s:%d: $ %s\n%s", filepath.Base(file), c.Line, c.Text, out)
		if *tutorialOut != "" && c.Line > 0 {
			name := filepath.Join(*tutorialOut, fmt.Sprintf("%s:%d", filepath.Base(file), c.Line))
			if err := os.WriteFile(name, []byte(out), 0o644); err != nil {
				t.Error(err)
			}
		}
		var ee *exec.ExitError
		switch {
		case c.Fails && err == nil:
			t.Fatalf("%s:%d: %s: exited 0; the tutorial says it fails", file, c.Line, c.Text)
		case c.Fails && !errors.As(err, &ee):
			t.Fatalf("%s:%d: %s: %v; the tutorial says it fails, but it did not run to its end", file, c.Line, c.Text, err)
		case !c.Fails && err != nil:
			t.Fatalf("%s:%d: %s: %v", file, c.Line, c.Text, err)
		}
		if m, missing := tutorial.Check(c.Expect, out); missing {
			t.Errorf("%s:%d: %s: output lacks %q (only <marked> parts and \"...\" may differ); the closest line it printed: %q", file, c.Line, c.Text, m.Want, m.Closest)
		}
		if len(c.Solution) > 0 {
			doExercise(t, bin, file, c)
		}
	}
}

// doExercise does an exercise the way its solution says, after its check
// failed on the lab where it was not done, and checks again: now it must
// pass and say "ok".
func doExercise(t *testing.T, bin, file string, c tutorial.Command) {
	t.Helper()
	for _, s := range c.Solution {
		out, err := shell(bin, s)
		t.Logf("%s:%d: solution: $ %s\n%s", filepath.Base(file), c.Line, s, out)
		if err != nil {
			t.Fatalf("%s:%d: the exercise's solution %s: %v", file, c.Line, s, err)
		}
	}
	out, err := shell(bin, c.Text)
	t.Logf("%s:%d: after the solution: $ %s\n%s", filepath.Base(file), c.Line, c.Text, out)
	if err != nil || !strings.Contains(out, "\nok: ") {
		t.Errorf("%s:%d: %s after the exercise's solution: %v; want it to pass, saying ok:\n%s", file, c.Line, c.Text, err, out)
	}
}

// agnhostSpec is the e2e tests' agnhost image, which the kubeadm
// tutorial's web servers run.
func agnhostSpec() images.Spec {
	for _, s := range images.All() {
		if s.Ref == images.AgnhostRef {
			return s
		}
	}
	panic("images: no agnhost")
}

// logClusterState logs what a reader of a failed kubeadm tutorial would
// look at next, before the lab goes: where the pods run, the Services and
// their endpoints, and each node's NAT rules, nftables tables and tracked
// TCP connections.
func logClusterState(t *testing.T, bin string) {
	t.Helper()
	lines := []string{
		"svclab kubectl get pods -A -o wide",
		"svclab kubectl get services,endpointslices -A -o wide",
	}
	for _, node := range []string{"node", "worker1", "worker2"} {
		lines = append(lines,
			"svclab exec "+node+" -- iptables-save -t nat",
			"svclab exec "+node+" -- nft list tables",
			"svclab exec "+node+" -- conntrack -L -p tcp",
		)
	}
	for _, line := range lines {
		out, err := shell(bin, line)
		t.Logf("after the failure: $ %s (%v)\n%s", line, err, out)
	}
}

// shell runs a tutorial's command line as the reader's shell would, with the
// built svclab, svcproxy and clusterdns first on PATH, and returns its
// combined output.
func shell(bin, line string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = errors.Join(err, ctx.Err())
	}
	return string(out), err
}
