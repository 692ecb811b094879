package tutorial

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const md = "# Lab\n" +
		"<!-- needs: ipvs -->\n" +
		"```sh\n" +
		"go build -o bin/ ./cmd/...\n" +
		"svclab up\n" +
		"```\n" +
		"\n" +
		"```text\n" +
		"HOST NAMESPACE\n" +
		"```\n" +
		"\n" +
		"Prose, and a block the reader only looks at:\n" +
		"```\n" +
		"svclab not-a-command\n" +
		"```\n" +
		"```sh\n" +
		"svclab exec client -- \\\n" +
		"    dig +search   web\n" +
		"svclab traffic --n 3 web\n" +
		"```\n" +
		"```text\n" +
		"web is 198.18.0.20\n" +
		"\n" +
		"...\n" +
		"```\n" +
		"```sh\n" +
		"svclab down\n" +
		"```\n"
	tut, err := Parse(strings.NewReader(md))
	if err != nil {
		t.Fatal(err)
	}
	want := &Tutorial{
		Needs: []string{"ipvs"},
		Commands: []Command{
			{Line: 5, Text: "svclab up", Expect: []string{"HOST NAMESPACE"}},
			{Line: 17, Text: "svclab exec client -- dig +search web"},
			{Line: 19, Text: "svclab traffic --n 3 web", Expect: []string{"web is 198.18.0.20", "", "..."}},
			{Line: 27, Text: "svclab down"},
		},
	}
	if !reflect.DeepEqual(tut, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", tut, want)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, md, err string }{
		{"output first", "```text\nweb\n```\n", "line 1: output block with no svclab command"},
		{"open block", "```sh\nsvclab up\n", "line 1: block not closed"},
		{"dangling backslash", "```sh\nsvclab exec client -- \\\n```\n", "line 3: command of line 2 ends in a backslash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.md))
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse: %v, want an error containing %q", err, tt.err)
			}
		})
	}
}

func TestMissing(t *testing.T) {
	out := "web is 198.18.0.20\n[####] 30/30\n\nPOD    ANSWERS\nweb-0  10\nweb-1  10\n"
	tests := []struct {
		name    string
		expect  []string
		missing bool
	}{
		{"all, numbers differ", []string{"web is 198.18.0.21", "POD ANSWERS", "web-2 11", "web-1 12"}, false},
		{"gap", []string{"web is 198.18.0.20", "...", "web-1  10"}, false},
		{"order matters", []string{"web-1 10", "POD ANSWERS"}, true},
		{"missing", []string{"(failed) 1"}, true},
		{"nothing expected", nil, false},
		{"prefix", []string{"web is ...", "web-1 ..."}, false},
		{"prefix missing", []string{"db is ..."}, true},
		{"gap within a line", []string{"...is 198.18.0.20", "web-... 10"}, false},
		{"gap at the start", []string{"... ANSWERS"}, false},
		{"gap within, missing", []string{"...is db"}, true},
		{"two gaps, wrong order", []string{"...ANSWERS...POD..."}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if line, missing := Missing(tt.expect, out); missing != tt.missing {
				t.Errorf("Missing = %q, %v; want missing %v", line, missing, tt.missing)
			}
		})
	}
}

// A command the reader is told will fail says so in a shell comment at its
// end; nothing else does.
func TestParseFails(t *testing.T) {
	tests := []struct {
		line  string
		fails bool
	}{
		{"svclab exec client -- curl -sS http://web-empty   # fails: connection refused", true},
		{"svclab exec client -- curl -sS http://web-empty # fails", true},
		{"svclab exec client -- curl -sS http://web-empty #fails", true},
		{"svclab exec client -- curl -sS http://web", false},
		{"svclab traffic web   # 30 requests", false},
		{"svclab traffic web   # failsafe", false},
		{"svclab traffic web   # this one fails", false},
		{"svclab exec client -- sh -c 'echo \"#\"'", false},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			tut, err := Parse(strings.NewReader("```sh\n" + tt.line + "\n```\n"))
			if err != nil {
				t.Fatal(err)
			}
			if got := tut.Commands[0].Fails; got != tt.fails {
				t.Errorf("Fails = %v, want %v", got, tt.fails)
			}
		})
	}
	// Continued lines: the comment ends the last one.
	tut, err := Parse(strings.NewReader("```sh\nsvclab exec client -- \\\n  curl http://web-empty  # fails: refused\n```\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Command{Line: 2, Text: "svclab exec client -- curl http://web-empty # fails: refused", Fails: true}
	if !reflect.DeepEqual(tut.Commands[0], want) {
		t.Errorf("Parse = %+v, want %+v", tut.Commands[0], want)
	}
}

// Bars vary in length from run to run: svclab traffic's and its timeline's.
func TestNormalizeBars(t *testing.T) {
	tests := []struct{ in, want string }{
		{"web-0 ████████ 8", "web-N █ N"},
		{"       0         19       0       0  uuuuuuuuuuuuuuuuuuu", "N N N N u"},
		{"       3          8      12       0  uuuuuuuukkkkkkkkkkkk", "N N N N uk"},
		{"       4          0      20       0  kkkkkkkkkkkkkkkkkkkk", "N N N N k"},
		{"       5          1       2       3  ukkxx", "N N N N ukx"},
		{"kk okk kkb", "k okk kkb"}, // only a word of bar characters is a bar
		{"a u k line", "a u k line"},
	}
	for _, tt := range tests {
		if got := Normalize(tt.in); got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
