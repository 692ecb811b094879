package doccheck

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// A Step is one step of docs/reading.md: a heading, the Go files to read and
// the names to look for in each, and the commands that show them at work.
type Step struct {
	Line     int
	Title    string    // "1. A Service becomes a Snapshot"
	Lines    int       // the heading's "(about N lines)": what the files hold
	Files    []FileRef // from the "- `path.go`: `Name`, `Type.Method`" lines
	Commands []Command // from the ```sh blocks, each with its ```text block
}

// A FileRef is a Go file of a step and the declarations it names there.
type FileRef struct {
	Line  int
	Path  string   // from the repository's root
	Names []string // "Render", "Port.Categorize", "Balancer"
}

// A Command is a `go test` or `go doc` line and the output it must print
// (the lines of the ```text block after it, matched as a tutorial's are).
type Command struct {
	Line   int
	Text   string
	Expect []string
}

var (
	stepRe  = regexp.MustCompile(`^## +(.+?) +\(about ([0-9,]+) lines\)$`)
	fileRe  = regexp.MustCompile("^- `([^`]+\\.go)`: (.+)$")
	nameRe  = regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)?)`")
	goCmdRe = regexp.MustCompile(`^go (test|doc) `)
)

// ParseReading reads docs/reading.md. A step is a level-2 heading ending in
// "(about N lines)"; within it, a list item "- `path.go`: `A`, `T.M`" names a
// file and what to read in it, a "go test ..." or "go doc ..." line in a
// ```sh block is a command, and the ```text block after it is the output it
// must print. Output with no command before it, and a block left open, are
// errors.
func ParseReading(r io.Reader) ([]Step, error) {
	var (
		steps []Step
		fence string
		n     int
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		n++
		line := sc.Text()
		var step *Step
		if len(steps) > 0 {
			step = &steps[len(steps)-1]
		}
		switch {
		case fence == "" && strings.HasPrefix(line, "```"):
			fence = strings.TrimSpace(strings.TrimPrefix(line, "```"))
			if fence == "" {
				fence = "plain"
			}
			if fence == "text" && (step == nil || len(step.Commands) == 0) {
				return nil, fmt.Errorf("line %d: output block with no command before it", n)
			}
		case fence != "" && line == "```":
			fence = ""
		case fence == "sh" && step != nil && goCmdRe.MatchString(line):
			step.Commands = append(step.Commands, Command{Line: n, Text: strings.TrimSpace(line)})
		case fence == "text":
			c := &step.Commands[len(step.Commands)-1]
			c.Expect = append(c.Expect, line)
		case fence != "":
		case strings.HasPrefix(line, "## "):
			m := stepRe.FindStringSubmatch(line)
			if m == nil {
				continue // a section that is not a step (the introduction's)
			}
			lines, _ := strconv.Atoi(strings.ReplaceAll(m[2], ",", ""))
			steps = append(steps, Step{Line: n, Title: m[1], Lines: lines})
		case step != nil && fileRe.MatchString(line):
			m := fileRe.FindStringSubmatch(line)
			ref := FileRef{Line: n, Path: m[1]}
			for _, nm := range nameRe.FindAllStringSubmatch(m[2], -1) {
				ref.Names = append(ref.Names, nm[1])
			}
			step.Files = append(step.Files, ref)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if fence != "" {
		return nil, fmt.Errorf("a block is not closed")
	}
	return steps, nil
}

// Declared returns the top-level names a Go file declares: functions,
// types, variables and constants by their name, methods as "Type.Method".
func Declared(filename string, src []byte) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), filename, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv != nil && len(d.Recv.List) == 1 {
				out[receiver(d.Recv.List[0].Type)+"."+d.Name.Name] = true
			} else {
				out[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, id := range s.Names {
						out[id.Name] = true
					}
				}
			}
		}
	}
	return out, nil
}

// receiver is the type name of a method's receiver: T for T, *T, T[P], *T[P].
func receiver(x ast.Expr) string {
	for {
		switch t := x.(type) {
		case *ast.StarExpr:
			x = t.X
		case *ast.IndexExpr:
			x = t.X
		case *ast.IndexListExpr:
			x = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
