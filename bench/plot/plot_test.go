package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/bench/report"
)

// parsedSVG is what the tests read back from writeSVG's output.
type parsedSVG struct {
	XMLName xml.Name `xml:"svg"`
	Rects   []struct {
		Class string  `xml:"class,attr"`
		X     float64 `xml:"x,attr"`
		W     float64 `xml:"width,attr"`
		Title string  `xml:"title"`
	} `xml:"rect"`
	Lines []parsedLine `xml:"line"`
	Text  []parsedText `xml:"text"`
}

type parsedText struct {
	Class string `xml:"class,attr"`
	Text  string `xml:",chardata"`
}

// texts is every text of the chart.
func (d parsedSVG) texts() []string {
	var out []string
	for _, t := range d.Text {
		out = append(out, t.Text)
	}
	return out
}

// command is the command's lines, joined again.
func (d parsedSVG) command() string {
	var lines []string
	for _, t := range d.Text {
		if t.Class == "command" {
			lines = append(lines, t.Text)
		}
	}
	return strings.Join(lines, " ")
}

type parsedLine struct {
	Class string  `xml:"class,attr"`
	X1    float64 `xml:"x1,attr"`
	X2    float64 `xml:"x2,attr"`
}

// render runs the command on files and parses the SVG it writes.
func render(t *testing.T, files ...string) (parsedSVG, []byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.svg")
	if err := run(files, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, b), b
}

func parse(t *testing.T, b []byte) parsedSVG {
	t.Helper()
	var doc parsedSVG
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, b)
	}
	return doc
}

// checkPlot reads doc back against the reports it was drawn from: in order,
// one bar per ratio, titled with its comparison, metric and ratio, as long as
// its ratio against its section's scale (the largest ratio with its
// interval, or 1×, rounded up to a half), a label with the ratio as the
// benchmarks print it, a whisker over the 95% interval where there is one,
// and per section a title with the date and the load, the command, and a
// line at 1×.
func checkPlot(t *testing.T, doc parsedSVG, reports []report.Report) {
	t.Helper()
	var bars, whiskers, ones int
	for _, r := range reports {
		top := 1.0
		for _, g := range r.Ratios {
			for _, v := range g.Values {
				top = max(top, v.Ratio+v.CI95)
			}
		}
		top = math.Ceil(top*2) / 2
		x := func(v float64) float64 { return barLeft + v/top*(barRight-barLeft) }
		for _, g := range r.Ratios {
			for _, v := range g.Values {
				label := fmt.Sprintf("%.2f×", v.Ratio)
				if v.CI95 > 0 {
					label += fmt.Sprintf(" ± %.2f", v.CI95)
				}
				if bars >= len(doc.Rects) {
					t.Fatalf("%d bars, want more: none for %s, %s", len(doc.Rects), g.Name, v.Metric)
				}
				bar := doc.Rects[bars]
				bars++
				if want := g.Name + ", " + v.Metric + ": " + label; bar.Title != want || bar.Class != "bar" {
					t.Errorf("bar %d: class %q, title %q, want a bar titled %q", bars, bar.Class, bar.Title, want)
				}
				if want := x(v.Ratio) - barLeft; math.Abs(bar.W-want) > 0.001 || bar.X != barLeft {
					t.Errorf("bar %d (%s, %s): x %v, width %v, want %v, %v", bars, g.Name, v.Metric, bar.X, bar.W, float64(barLeft), want)
				}
				if !slices.Contains(doc.texts(), label) {
					t.Errorf("no label %q among %q", label, doc.texts())
				}
				if v.CI95 > 0 {
					i := slices.IndexFunc(doc.Lines, func(l parsedLine) bool {
						return l.Class == "ci" && math.Abs(l.X1-x(max(v.Ratio-v.CI95, 0))) < 0.001 && math.Abs(l.X2-x(v.Ratio+v.CI95)) < 0.001
					})
					if i < 0 {
						t.Errorf("%s, %s: no whisker from %.2f× to %.2f×", g.Name, v.Metric, max(v.Ratio-v.CI95, 0), v.Ratio+v.CI95)
					}
					whiskers++
				}
			}
			if !slices.Contains(doc.texts(), g.Name) {
				t.Errorf("no heading %q among %q", g.Name, doc.texts())
			}
		}
		title := fmt.Sprintf("%s: %s, load average %s before, %s after", r.Bench, r.Date, r.LoadBefore, r.LoadAfter)
		if !slices.Contains(doc.texts(), title) {
			t.Errorf("no title %q among %q", title, doc.texts())
		}
		if want := strings.Join(strings.Fields(r.Command), ""); !strings.Contains(strings.ReplaceAll(doc.command(), " ", ""), want) {
			t.Errorf("no command %q in %q", want, doc.command())
		}
		if !slices.ContainsFunc(doc.Lines, func(l parsedLine) bool {
			return l.Class == "one" && math.Abs(l.X1-x(1)) < 0.001 && l.X1 == l.X2
		}) {
			t.Errorf("%s: no line at 1× (x %v) among %+v", r.Bench, x(1), doc.Lines)
		}
		ones++
	}
	if bars != len(doc.Rects) || whiskers+ones != len(doc.Lines) {
		t.Errorf("%d bars and %d lines, want %d and %d", len(doc.Rects), len(doc.Lines), bars, whiskers+ones)
	}
}

func readReports(t *testing.T, files ...string) []report.Report {
	t.Helper()
	var rs []report.Report
	for _, f := range files {
		r, err := report.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

// TestPlotFixture draws testdata/fixture.json (made-up ratios, named as a
// fixture) and reads the SVG back; the scale is written out here (2.2
// rounded up to a half) so that checkPlot's own is checked once.
func TestPlotFixture(t *testing.T) {
	doc, _ := render(t, "testdata/fixture.json")
	checkPlot(t, doc, readReports(t, "testdata/fixture.json"))
	const top = 2.5
	for i, ratio := range []float64{0.5, 1.25, 2.2} {
		if got, want := doc.Rects[i].W, ratio/top*(barRight-barLeft); math.Abs(got-want) > 0.001 {
			t.Errorf("bar %d: width %v, want %v", i, got, want)
		}
	}
	for _, s := range []string{"c / <d>", "1×", "0.50×"} {
		if !slices.Contains(doc.texts(), s) {
			t.Errorf("no text %q among %q", s, doc.texts())
		}
	}
}

// TestPlotSections: each report is a section with its own scale and 1× line;
// a ratio with an interval has a whisker and says "± x" in its label.
func TestPlotSections(t *testing.T) {
	files := []string{"testdata/fixture.json", "testdata/interval.json", "testdata/fixture.json"}
	doc, _ := render(t, files...)
	checkPlot(t, doc, readReports(t, files...))
	if got, want := doc.Rects[3].W, 1.05/1.5*(barRight-barLeft); math.Abs(got-want) > 0.001 {
		t.Errorf("the interval section's first bar: width %v, want %v (its own scale, 1.5×)", got, want)
	}
	if !slices.Contains(doc.texts(), "1.05× ± 0.07") {
		t.Errorf("no label 1.05× ± 0.07 among %q", doc.texts())
	}
}

func TestPlotErrors(t *testing.T) {
	for _, tc := range []struct {
		name, json, want string
	}{
		{"not JSON", `{`, "unexpected end of JSON input"},
		{"no ratios", `{"bench": "x"}`, "ratios: none"},
		{"no values", `{"ratios": [{"name": "a / b"}]}`, `ratios "a / b": no values`},
		{"zero", `{"ratios": [{"name": "a / b", "values": [{"metric": "m", "ratio": 0}]}]}`, `ratios "a / b": m: ratio 0 is not a positive number`},
		{"negative", `{"ratios": [{"name": "a / b", "values": [{"metric": "m", "ratio": -1}]}]}`, "ratio -1 is not a positive number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "r.json")
			if err := os.WriteFile(file, []byte(tc.json), 0o644); err != nil {
				t.Fatal(err)
			}
			err := run([]string{file}, filepath.Join(t.TempDir(), "out.svg"))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), file) {
				t.Errorf("error %v, want one naming %s and saying %q", err, file, tc.want)
			}
		})
	}
	if err := run(nil, ""); err == nil {
		t.Error("no report: no error")
	}
}

// TestWriteSVGEscapes: a name with markup stays text.
func TestWriteSVGEscapes(t *testing.T) {
	var b bytes.Buffer
	r := report.Report{Bench: "b", Command: `x -json "a&b"`, Ratios: []report.Group{{Name: "<a> / b", Values: []report.Ratio{{Metric: "m", Ratio: 1}}}}}
	if err := writeSVG(&b, []report.Report{r}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<a>") || !strings.Contains(b.String(), "&lt;a&gt; / b") {
		t.Errorf("the name is not escaped:\n%s", b.String())
	}
}

// TestWrap: a command is broken at spaces, and a word wider than the chart
// within itself, into lines no wider than the chart; nothing is lost.
func TestWrap(t *testing.T) {
	long := "go test -run '^$' -bench '^(FullSync|NFTFullSync|OneServiceChange|NFTOneServiceChange|AddService|SyncCPU|NFTSyncCPU)$/(ports=1000$|^(nft|legacy|restart|one-service-change)$)/^ports=1000$' -benchtime 3x -timeout 60m ./bench/iptables/ -args -report docs/benchmarks/iptables-sync.json"
	for _, tc := range []struct {
		in   string
		n    int
		want []string
	}{
		{"a b c", 3, []string{"a b", "c"}},
		{"a bcdef g", 3, []string{"a", "bcd", "ef", "g"}},
		{"ab cdefgh i", 4, []string{"ab", "cdef", "gh i"}},
		{"short", 120, []string{"short"}},
	} {
		if got := wrap(tc.in, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("wrap(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	lines := wrap(long, commandWidth)
	for _, l := range lines {
		if len([]rune(l)) > commandWidth {
			t.Errorf("line %q is wider than %d", l, commandWidth)
		}
	}
	if strings.ReplaceAll(strings.Join(lines, ""), " ", "") != strings.ReplaceAll(long, " ", "") || len(lines) < 3 {
		t.Errorf("wrap lost or kept too much: %q", lines)
	}
}
