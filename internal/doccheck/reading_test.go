package doccheck

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/tutorial"
)

// readingPage is the learner's path through the code, from root.
const readingPage = "docs/reading.md"

// lineSlack is how far a step's files may have grown or shrunk from the
// "(about N lines)" its heading promises before the page must be told.
const lineSlack = 0.35

// TestReadingPath holds docs/reading.md to the code it walks through: every
// file it names exists and declares every function, type or method it names
// there (Port.Categorize, Render, Balancer); each step's files hold about as
// many lines as its heading says; and each step's commands (go test -run ...
// -v, go doc ...) run from the repository's root, as a reader would type
// them, and print the output the page shows, matched as a tutorial's output
// is (internal/tutorial). With -short the commands are not run.
//
//	go test ./internal/doccheck -run TestReadingPath -v
func TestReadingPath(t *testing.T) {
	steps, err := ParseReading(strings.NewReader(read(t, readingPage)))
	if err != nil {
		t.Fatalf("%s: %v", readingPage, err)
	}
	if len(steps) < 5 {
		t.Fatalf("%s has %d steps (a level-2 heading ending in \"(about N lines)\"), want five or more", readingPage, len(steps))
	}
	total := 0
	for _, step := range steps {
		t.Run(step.Title, func(t *testing.T) {
			if len(step.Files) == 0 || len(step.Commands) == 0 {
				t.Errorf("%s:%d: a step names at least one file and one command", readingPage, step.Line)
			}
			lines := 0
			for _, f := range step.Files {
				lines += checkFileRef(t, f)
			}
			total += lines
			t.Logf("%d files, %d lines (the page says about %d)", len(step.Files), lines, step.Lines)
			if lo, hi := float64(step.Lines)*(1-lineSlack), float64(step.Lines)*(1+lineSlack); float64(lines) < lo || float64(lines) > hi {
				t.Errorf("%s:%d: the step's files hold %d lines, the heading says about %d: update it", readingPage, step.Line, lines, step.Lines)
			}
			if testing.Short() {
				return
			}
			for _, c := range step.Commands {
				runReadingCommand(t, c)
			}
		})
	}
	t.Logf("%d steps, %d lines of Go in all", len(steps), total)
}

// checkFileRef checks that f's file exists and declares the names f gives,
// and returns its number of lines.
func checkFileRef(t *testing.T, f FileRef) int {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, f.Path))
	if err != nil {
		t.Errorf("%s:%d: %v", readingPage, f.Line, err)
		return 0
	}
	declared, err := Declared(f.Path, src)
	if err != nil {
		t.Errorf("%s:%d: %v", readingPage, f.Line, err)
	}
	for _, name := range f.Names {
		if !declared[name] {
			t.Errorf("%s:%d: %s declares no %s", readingPage, f.Line, f.Path, name)
		}
	}
	return bytes.Count(src, []byte("\n"))
}

// runReadingCommand runs c as the reader would, through sh from the
// repository's root, and checks its output.
func runReadingCommand(t *testing.T, c Command) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", c.Text)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s:%d: %s: %v\n%s", readingPage, c.Line, c.Text, err, out)
		return
	}
	if line, missing := tutorial.Missing(c.Expect, string(out)); missing {
		t.Errorf("%s:%d: %s: the output lacks %q (normalized); it printed:\n%s", readingPage, c.Line, c.Text, line, out)
	}
}
