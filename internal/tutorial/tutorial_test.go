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
	out := "web is 198.18.0.20\n[####] 30/30\n\nPOD    ANSWERS\nweb-0  10\nweb-1  10\nweb-0: you came from 198.19.0.1:55682\n"
	tests := []struct {
		name    string
		expect  []string
		missing bool
	}{
		{"all there", []string{"web is 198.18.0.20", "POD ANSWERS", "web-0 10", "web-1 10"}, false},
		{"a number went stale", []string{"web is 198.18.0.21"}, true},
		{"a count went stale", []string{"web-1 12"}, true},
		{"column widths are free", []string{"POD ANSWERS", "web-0      10"}, false},
		{"a port marked as varying", []string{"web-0: you came from 198.19.0.1:<port>"}, false},
		{"a marked value is one word", []string{"web-0: <what> 198.19.0.1:55682"}, true},
		{"only what is marked varies", []string{"web-0: you came from 198.19.0.2:<port>"}, true},
		{"a count and a pod marked", []string{"<pod> <n>", "<pod> <n>"}, false},
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
		{"regular expression characters are text", []string{"[####] 30/30"}, false},
		{"regular expression characters are text, missing", []string{"[#.##] 30/30"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if line, missing := Missing(tt.expect, out); missing != tt.missing {
				t.Errorf("Missing = %q, %v; want missing %v", line, missing, tt.missing)
			}
		})
	}
}

// A stale line is reported with the output's line most like it: what the
// tutorial shows next to what the lab printed.
func TestCheckClosest(t *testing.T) {
	out := "! -s 198.19.0.0/17 -d 198.18.0.21/32 -j SVCP-MARK-MASQ\n-A SVCP-SERVICES -d 198.18.0.21/32 -j SVCP-SVC-X\n"
	m, missing := Check([]string{"-A SVCP-SERVICES -d 198.18.0.21/32 -j SVCP-SVC-X", "! -s 198.19.0.0/16 -d 198.18.0.21/32 -j SVCP-MARK-MASQ"}, out)
	if !missing || m.Want != "! -s 198.19.0.0/16 -d 198.18.0.21/32 -j SVCP-MARK-MASQ" || m.Closest != "" {
		t.Errorf("Check = %+v, %v; want the second line missing, no line after the first to offer", m, missing)
	}
	m, _ = Check([]string{"! -s 198.19.0.0/16 -d 198.18.0.21/32 -j SVCP-MARK-MASQ"}, out)
	if m.Closest != "! -s 198.19.0.0/17 -d 198.18.0.21/32 -j SVCP-MARK-MASQ" {
		t.Errorf("Check's closest line = %q, want the /17 rule", m.Closest)
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

// Bars are as long as the counts beside them: each run is compared as one
// character, and blanks as one.
func TestNormalizeBars(t *testing.T) {
	tests := []struct{ in, want string }{
		{"web-0 ████████ 8", "web-0 █ 8"},
		{"       0         19       0       0  uuuuuuuuuuuuuuuuuuu", "0 19 0 0 u"},
		{"       3          8      12       0  uuuuuuuukkkkkkkkkkkk", "3 8 12 0 uk"},
		{"       4          0      20       0  kkkkkkkkkkkkkkkkkkkk", "4 0 20 0 k"},
		{"       5          1       2       3  ukkxx", "5 1 2 3 ukx"},
		{"kk okk kkb", "k okk kkb"}, // only a word of bar characters is a bar
		{"a u k line", "a u k line"},
	}
	for _, tt := range tests {
		if got := Normalize(tt.in); got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Only a lower-case word in angle brackets marks a value that varies: the
// flags of `ip addr` (<BROADCAST,UP>) are text like any other.
func TestPlaceholderIsALowerCaseWord(t *testing.T) {
	out := "8: svcp-ipvs0: <BROADCAST,NOARP,UP,LOWER_UP> mtu 1500\n"
	if _, missing := Check([]string{"<n>: svcp-ipvs0: <BROADCAST,NOARP,UP,LOWER_UP> mtu 1500"}, out); missing {
		t.Error("the line with its flags as printed is missing")
	}
	if _, missing := Check([]string{"<n>: svcp-ipvs0: <BROADCAST,UP> mtu 1500"}, out); !missing {
		t.Error("other flags in angle brackets matched: they are text, not a value that varies")
	}
}

// An exercise's solution follows its `svclab check NN  # fails`, hidden
// from the reader in comments; anywhere else it is an error.
func TestParseSolution(t *testing.T) {
	md := "```sh\nsvclab check 03   # fails: not done yet\n```\n\n```text\nnot yet: ...\n```\n\n<!-- solution: svclab pod web-1 --ready=false -->\n<!-- solution: svclab traffic web -->\n"
	tut, err := Parse(strings.NewReader(md))
	if err != nil {
		t.Fatal(err)
	}
	c := tut.Commands[0]
	if !c.Fails || len(c.Solution) != 2 || c.Solution[0] != "svclab pod web-1 --ready=false" || c.Solution[1] != "svclab traffic web" {
		t.Errorf("parsed %+v, want a failing check with two solution commands", c)
	}
	for _, bad := range []string{
		"<!-- solution: svclab pod web-1 --ready=false -->\n",
		"```sh\nsvclab traffic web\n```\n<!-- solution: svclab pod web-1 --ready=false -->\n",
		"```sh\nsvclab check 03\n```\n<!-- solution: svclab pod web-1 --ready=false -->\n",
	} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}
