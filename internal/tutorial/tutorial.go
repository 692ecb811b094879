package tutorial

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A Command is one svclab command of a tutorial and the output it must print.
type Command struct {
	Line   int      // of the command's first line in the file, for messages
	Text   string   // "svclab traffic --n 30 web", continuations joined
	Expect []string // the lines of the ```text blocks after it
	// Fails says the command must exit non-zero: its line ends in a shell
	// comment "# fails" (or "# fails: why"), which the reader sees and sh
	// ignores. A refused connection is a lesson too.
	Fails bool
	// Solution is, for an exercise's `svclab check NN  # fails`, the
	// commands that do the exercise, from "<!-- solution: CMD -->" lines
	// after it (outside blocks; the reader does not see them). The test
	// runs the check before them, where it must fail, and after them,
	// where it must pass: both labs, the exercise undone and done.
	Solution []string
}

// A Tutorial is what Parse found in one file.
type Tutorial struct {
	Commands []Command
	Needs    []string // from "<!-- needs: ipvs -->", in order
}

// Files returns the tutorials in dir (tutorials/NN-topic.md), in order.
func Files(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "[0-9][0-9]-*.md"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no tutorials (NN-topic.md) in %s", dir)
	}
	return files, nil
}

// ParseFile parses the tutorial at path.
func ParseFile(path string) (*Tutorial, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tut, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tut, nil
}

var (
	needs    = regexp.MustCompile(`^<!--\s*needs:\s*([a-z0-9, ]+?)\s*-->$`)
	solution = regexp.MustCompile(`^<!--\s*solution:\s*(svclab .+?)\s*-->$`)
	// fails is the comment that ends a command expected to fail.
	fails = regexp.MustCompile(`(^|\s)#\s*fails\b[^#]*$`)
)

// Parse reads a tutorial. A ```text block with no command before it, a
// continuation at the end of a block and a block left open are errors: each
// means the test would check something other than what the reader sees.
func Parse(r io.Reader) (*Tutorial, error) {
	var (
		tut   Tutorial
		fence string // "" outside a block, else its info string ("sh", "text", "plain")
		start int    // line of the open block
		cont  *Command
		n     int
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case fence == "" && strings.HasPrefix(line, "```"):
			fence, start = strings.TrimSpace(strings.TrimPrefix(line, "```")), n
			if fence == "" {
				fence = "plain"
			}
			if fence == "text" && len(tut.Commands) == 0 {
				return nil, fmt.Errorf("line %d: output block with no svclab command before it", n)
			}
		case fence == "" && solution.MatchString(strings.TrimSpace(line)):
			m := solution.FindStringSubmatch(strings.TrimSpace(line))
			if len(tut.Commands) == 0 || !strings.HasPrefix(tut.Commands[len(tut.Commands)-1].Text, "svclab check ") {
				return nil, fmt.Errorf("line %d: a solution with no `svclab check NN` before it", n)
			}
			c := &tut.Commands[len(tut.Commands)-1]
			c.Solution = append(c.Solution, m[1])
		case fence == "":
			if m := needs.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				for _, need := range strings.Split(m[1], ",") {
					tut.Needs = append(tut.Needs, strings.TrimSpace(need))
				}
			}
		case line == "```":
			if cont != nil {
				return nil, fmt.Errorf("line %d: command of line %d ends in a backslash at the end of its block", n, cont.Line)
			}
			fence = ""
		case fence == "sh" && cont != nil:
			text, more := strings.CutSuffix(strings.TrimSpace(line), `\`)
			cont.Text += " " + text
			if !more {
				cont = nil
			}
		case fence == "sh" && strings.HasPrefix(line, "svclab "):
			text, more := strings.CutSuffix(strings.TrimSpace(line), `\`)
			tut.Commands = append(tut.Commands, Command{Line: n, Text: strings.TrimSpace(text)})
			if more {
				cont = &tut.Commands[len(tut.Commands)-1]
			}
		case fence == "text":
			c := &tut.Commands[len(tut.Commands)-1]
			c.Expect = append(c.Expect, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if fence != "" {
		return nil, fmt.Errorf("line %d: block not closed", start)
	}
	for i := range tut.Commands {
		c := &tut.Commands[i]
		c.Text = spaces.ReplaceAllString(c.Text, " ")
		c.Fails = fails.MatchString(c.Text)
		if len(c.Solution) > 0 && !c.Fails {
			return nil, fmt.Errorf("line %d: %s: an exercise's check is shown before the learner does it, where it fails: end it in \"# fails\"", c.Line, c.Text)
		}
	}
	return &tut, nil
}
