package vm

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/tutorial"
)

// TestLab boots the guest of `make lab-ipvs` (NewLabGuest, BuildLab's programs) once
// and runs in it, one after the other: the demo's IPVS step (`svclab demo --only
// ipvs`: the lab's build, IPVS mode, its removal), then the commands of every
// tutorial that needs IPVS (tutorials/07-ipvs.md), each one's output checked as
// test/lab checks the others (internal/tutorial). `make lab-ipvs` runs the whole
// demo; the other steps have their test in test/lab.
func TestLab(t *testing.T) {
	requireVM(t)
	files, err := tutorial.Files(filepath.Join("..", "..", "tutorials"))
	if err != nil {
		t.Fatal(err)
	}
	tuts := map[string]*tutorial.Tutorial{}
	var names []string
	for _, f := range files {
		tut, err := tutorial.ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(tut.Needs, "ipvs") && len(tut.Commands) > 0 {
			tuts[filepath.Base(f)] = tut
			names = append(names, filepath.Base(f))
		}
	}
	// Under TCG on two busy cores the demo's step takes minutes, each tutorial command
	// seconds to a minute.
	ctx, k := testKernel(t, 20*time.Minute)
	work := t.TempDir()
	if err := BuildLab(ctx, work); err != nil {
		t.Fatal(err)
	}
	// The script is a file of the guest, not the shell's command line: the
	// demo's last step reports a process whose command line names the
	// lab's state directory or namespaces as left behind, and an
	// exercise's solution may name them (/run/svclab/services.yaml).
	g, err := NewLabGuest(work, "/bin/sh", labScriptPath)
	if err != nil {
		t.Skipf("the lab in the VM: %v", err)
	}
	g.Data[labScriptPath] = []byte(labScript(names, tuts))
	var out GuestOutput
	var lines []string
	res, err := Run(ctx, k, g, work, func(l string) {
		if out.Line(l) {
			lines = append(lines, l)
			t.Log("guest| " + l)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s: boot %s, boot+lab %s", k.Version, res.Boot.Round(100*time.Millisecond), res.Total.Round(100*time.Millisecond))
	sections := splitSections(lines)

	demo, ok := sections["demo"]
	switch {
	case !ok:
		t.Errorf("svclab demo --only ipvs did not run (exit code %d; see the console above)", res.ExitCode)
	case demo.status != 0:
		t.Errorf("svclab demo --only ipvs: exit status %d", demo.status)
	}
	// The IPVS branch of the demo, not its fallback to iptables mode.
	for _, want := range []string{"## 2. IPVS mode", "ipvs", "# IPVS (ipvsadm -ln)", "TCP  198.18.0.20:80 rr",
		"ok: svcproxy runs IPVS mode: web's virtual server spread the connections", "All 3 steps saw what they expected"} {
		if !strings.Contains(demo.out, want) {
			t.Errorf("svclab demo --only ipvs: output lacks %q", want)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for i, c := range tuts[name].Commands {
				s, ok := sections[fmt.Sprintf("%s %d", name, i)]
				switch {
				case !ok:
					t.Fatalf("line %d: %s: did not run", c.Line, c.Text)
				case s.status != 0 && !c.Fails:
					t.Errorf("line %d: %s: exit status %d\n%s", c.Line, c.Text, s.status, s.out)
				case s.status == 0 && c.Fails:
					t.Errorf("line %d: %s: exit status 0; the tutorial says it fails\n%s", c.Line, c.Text, s.out)
				}
				if m, ok := tutorial.Check(c.Expect, s.out); ok {
					t.Errorf("line %d: %s: output lacks %q (only <marked> parts and \"...\" may differ); the closest line it printed: %q\n%s", c.Line, c.Text, m.Want, m.Closest, s.out)
				}
				if len(c.Solution) > 0 {
					checkExercise(t, sections, fmt.Sprintf("%s %d", name, i), c)
				}
			}
		})
	}
}

// checkExercise checks what labScript ran after an exercise's check (c, in
// section name), which failed on the lab where the exercise was not done:
// the solution's commands, each of which must succeed, and the check
// again, which must now pass and say "ok", as test/lab's doExercise does.
func checkExercise(t *testing.T, sections map[string]section, name string, c tutorial.Command) {
	t.Helper()
	for j, sol := range c.Solution {
		s, ok := sections[fmt.Sprintf("%s solution %d", name, j)]
		if !ok || s.status != 0 {
			t.Fatalf("line %d: the exercise's solution %s: did not succeed (exit status %d)\n%s", c.Line, sol, s.status, s.out)
		}
	}
	s, ok := sections[name+" after"]
	if !ok || s.status != 0 || !strings.Contains(s.out, "\nok: ") {
		t.Errorf("line %d: %s after the exercise's solution: exit status %d; want it to pass, saying ok:\n%s", c.Line, c.Text, s.status, s.out)
	}
}

// labScriptPath is where the guest holds labScript.
const labScriptPath = "/lab-script.sh"

// Markers of labScript's sections on the console.
const (
	sectionMarker = "=== vm-lab section "
	statusMarker  = "=== vm-lab status "
)

// labScript is the guest's shell script: the demo's IPVS step, then each
// tutorial's commands as a learner types them, each between markers with its exit
// status; after an exercise's check, its solution's commands and the check
// again. A failed command does not stop the rest: the VM is thrown away after.
func labScript(names []string, tuts map[string]*tutorial.Tutorial) string {
	var b strings.Builder
	b.WriteString(labEnv + "set -o pipefail\n")
	section := func(name, cmd string) {
		fmt.Fprintf(&b, "echo '%s%s'\n{ %s\n} 2>&1 | cat\necho \"%s$?\"\n", sectionMarker, name, cmd, statusMarker)
	}
	section("demo", "svclab demo --control-plane=false --only ipvs")
	for _, name := range names {
		for i, c := range tuts[name].Commands {
			section(fmt.Sprintf("%s %d", name, i), c.Text)
			for j, sol := range c.Solution {
				section(fmt.Sprintf("%s %d solution %d", name, i, j), sol)
			}
			if len(c.Solution) > 0 {
				section(fmt.Sprintf("%s %d after", name, i), c.Text)
			}
		}
	}
	return b.String()
}

type section struct {
	out    string
	status int
}

// splitSections reads labScript's sections back from the guest's output.
func splitSections(lines []string) map[string]section {
	m := map[string]section{}
	name := ""
	var out []string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, sectionMarker):
			name, out = strings.TrimPrefix(l, sectionMarker), nil
		case strings.HasPrefix(l, statusMarker) && name != "":
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, statusMarker)))
			if err != nil {
				n = -1
			}
			m[name] = section{out: strings.Join(out, "\n"), status: n}
			name = ""
		case name != "":
			out = append(out, l)
		}
	}
	return m
}
