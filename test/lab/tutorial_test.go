package lab

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/lab"
)

// A tutorial's commands are the lines starting with "svclab " in its ```sh
// blocks (the others, like `go build`, are for the reader's machine). A
// ```text block is the expected output of the command just before it.
type tutorialCmd struct {
	line   int    // in the file
	cmd    string // "svclab traffic web"
	expect []string
}

func readTutorial(t *testing.T, path string) []tutorialCmd {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []tutorialCmd
	fence, n := "", 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case fence == "" && strings.HasPrefix(line, "```"):
			fence = strings.TrimPrefix(line, "```")
			if fence == "" {
				fence = "plain"
			}
		case fence != "" && line == "```":
			fence = ""
		case fence == "sh" && strings.HasPrefix(line, "svclab "):
			cmds = append(cmds, tutorialCmd{line: n, cmd: line})
		case fence == "text" && len(cmds) > 0:
			c := &cmds[len(cmds)-1]
			c.expect = append(c.expect, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cmds
}

var (
	digits = regexp.MustCompile(`[0-9]+`)
	blocks = regexp.MustCompile(`█+`)
	spaces = regexp.MustCompile(`\s+`)
)

// normalize keeps what a tutorial can promise of a line: numbers (ports,
// counts, addresses' last parts) and bar lengths vary from run to run.
func normalize(s string) string {
	s = digits.ReplaceAllString(s, "N")
	s = blocks.ReplaceAllString(s, "█")
	return strings.TrimSpace(spaces.ReplaceAllString(s, " "))
}

// lineMatches compares normalized lines; "..." in an expected line stands for
// any text there: a chain name's hash at the end, a log line's time at the
// start, a reason at the end.
func lineMatches(got, want string) bool {
	parts := strings.Split(want, "...")
	if len(parts) == 1 {
		return got == want
	}
	rest, ok := strings.CutPrefix(got, parts[0])
	if !ok {
		return false
	}
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return strings.HasSuffix(rest, last)
}

// expectIn reports the first expected line (normalized) that is not found in
// out, in order; "..." lines stand for anything, and "..." within a line for
// any text there.
func expectIn(expect []string, out string) (string, bool) {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		got = append(got, normalize(l))
	}
	i := 0
	for _, e := range expect {
		e = normalize(e)
		if e == "" || e == "..." {
			continue
		}
		for i < len(got) && !lineMatches(got[i], e) {
			i++
		}
		if i == len(got) {
			return e, false
		}
		i++
	}
	return "", true
}

func TestTutorials(t *testing.T) {
	netnstest.RequireRoot(t, lab.DemoTools...)
	files, err := filepath.Glob(filepath.Join("..", "..", "tutorials", "[0-9]*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no tutorials found: %v", err)
	}
	bin := build(t)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			cmds := readTutorial(t, file)
			if len(cmds) == 0 {
				t.Fatal("no svclab commands")
			}
			t.Cleanup(func() {
				down(t, bin)
				requireClean(t, bin)
			})
			for _, c := range cmds {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				args := strings.Fields(strings.TrimPrefix(c.cmd, "svclab "))
				out, err := svclab(ctx, bin, args...)
				cancel()
				if err != nil {
					t.Fatalf("%s:%d: %s: %v\n%s", file, c.line, c.cmd, err, out)
				}
				if missing, ok := expectIn(c.expect, out); !ok {
					t.Errorf("%s:%d: %s: output lacks %q (numbers may differ):\n%s", file, c.line, c.cmd, missing, out)
				}
			}
		})
	}
}
