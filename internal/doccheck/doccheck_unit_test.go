package doccheck

import (
	"reflect"
	"strings"
	"testing"
)

func TestLinksParse(t *testing.T) {
	md := "See [the map](architecture.md#the-rooms) and [Go](https://go.dev).\n" +
		"```\n[not a link](nowhere.md)\n```\n" +
		"`[code](nowhere.md)` and ![a plot](benchmarks/userspace.svg \"title\") and [here](#data-flow)\n"
	got := Links(md)
	want := []Link{
		{Line: 1, Target: "architecture.md", Fragment: "the-rooms"},
		{Line: 1, Target: "https://go.dev"},
		{Line: 5, Target: "benchmarks/userspace.svg"},
		{Line: 5, Target: "", Fragment: "data-flow"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Links =\n%+v\nwant\n%+v", got, want)
	}
	if got[1].Relative() || !got[0].Relative() {
		t.Errorf("Relative: a URL is not relative, a path is")
	}
}

func TestAnchors(t *testing.T) {
	md := "# Design decisions\n" +
		"## Over the socket LB (`--offload socklb`)\n" +
		"```sh\n# not a heading\n```\n" +
		"### Sync: nft without the table in its cache (2026-11-30 20:08–20:39 UTC)\n" +
		"## Data path\n## Data path\n"
	got := Anchors(md)
	for _, want := range []string{
		"design-decisions",
		"over-the-socket-lb---offload-socklb",
		"sync-nft-without-the-table-in-its-cache-2026-11-30-20082039-utc",
		"data-path", "data-path-1",
	} {
		if !got[want] {
			t.Errorf("Anchors has no %q; it has %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a shell comment in a code block made an anchor")
	}
}

func TestCitations(t *testing.T) {
	text := "as issue 31 asks\nIssue 10 point 7: refused\nissues 16 and 17\n" +
		"see #36.\nkubernetes/kubernetes#129128 is public\nKEP-3453, CVE-2020-8558, 0x4000\n" +
		"a colour #4a7ab5, a fragment docs.md#3-steps\n(#12)\n"
	var got []string
	for _, c := range Citations(text) {
		got = append(got, c.Text)
	}
	want := []string{"issue 31", "Issue 10", "issues 16", "#36", "(#12"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Citations = %q, want %q", got, want)
	}
}

func TestCommentCitations(t *testing.T) {
	src := []byte("package p\n\n// Sync, as issue 12 asks.\nvar mark = \"%#08x issue 9\"\n\n/* two\n   lines #7 */\n")
	got := CommentCitations(src)
	want := []Citation{{Line: 3, Text: "issue 12"}, {Line: 7, Text: "#7"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CommentCitations = %+v, want %+v", got, want)
	}
}

func TestParseReading(t *testing.T) {
	md := "# Reading\n\n## How to read (not a step)\n\n" +
		"## 1. A Snapshot (about 1,200 lines)\n\n" +
		"- `service/topology.go`: `Port.Categorize`, `filterEndpoints`\n" +
		"- not a file\n\n" +
		"```sh\ngo doc ./service Port.Categorize\n```\n\n```text\nfunc (p *Port) Categorize(...)\n```\n" +
		"## 2. The balancer (about 200 lines)\n\n- `userspace/balancer.go`: `Balancer`\n\n" +
		"```sh\ncd somewhere\ngo test ./userspace -run 'TestBalancerPick$' -v\n```\n"
	got, err := ParseReading(strings.NewReader(md))
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{
		{Line: 5, Title: "1. A Snapshot", Lines: 1200,
			Files:    []FileRef{{Line: 7, Path: "service/topology.go", Names: []string{"Port.Categorize", "filterEndpoints"}}},
			Commands: []Command{{Line: 11, Text: "go doc ./service Port.Categorize", Expect: []string{"func (p *Port) Categorize(...)"}}}},
		{Line: 17, Title: "2. The balancer", Lines: 200,
			Files:    []FileRef{{Line: 19, Path: "userspace/balancer.go", Names: []string{"Balancer"}}},
			Commands: []Command{{Line: 23, Text: "go test ./userspace -run 'TestBalancerPick$' -v"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseReading =\n%+v\nwant\n%+v", got, want)
	}
	if _, err := ParseReading(strings.NewReader("## 1. X (about 1 lines)\n```text\nout\n```\n")); err == nil {
		t.Error("output with no command before it: no error")
	}
}

func TestDeclared(t *testing.T) {
	src := "package p\ntype Port struct{}\ntype Ledger[P any] struct{}\n" +
		"func (p *Port) Categorize() {}\nfunc (l *Ledger[P]) Begin() {}\nfunc Render() {}\n" +
		"var hooks, chains = 1, 2\nconst Mode = \"x\"\n"
	got, err := Declared("p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Port", "Ledger", "Port.Categorize", "Ledger.Begin", "Render", "hooks", "chains", "Mode"} {
		if !got[name] {
			t.Errorf("Declared has no %s: %v", name, got)
		}
	}
	if got["Categorize"] {
		t.Error("a method is declared by its bare name")
	}
}

func TestTable(t *testing.T) {
	md := "# Page\n## The rooms\nSome text.\n\n" +
		"| room | holds |\n|---|---|\n| `service` | the domain |\n| `kernel/...`, `bench/...` | the kernel |\n\n" +
		"| second | table |\n|---|---|\n| `no` | never read |\n" +
		"## Next\n| `nor` | this |\n"
	got := Table(md, "The rooms")
	want := [][]string{{"`service`", "the domain"}, {"`kernel/...`, `bench/...`", "the kernel"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Table = %q, want %q", got, want)
	}
	if got := CodeSpans(got[1][0]); !reflect.DeepEqual(got, []string{"kernel/...", "bench/..."}) {
		t.Errorf("CodeSpans = %q", got)
	}
	if got := Table(md, "No such heading"); got != nil {
		t.Errorf("Table of a missing heading = %q, want nil", got)
	}
}
