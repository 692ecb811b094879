package main

import (
	"bytes"
	"encoding/xml"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// parsedSVG is what the tests read back from writeSVG's output.
type parsedSVG struct {
	XMLName xml.Name `xml:"svg"`
	Rects   []struct {
		X     float64 `xml:"x,attr"`
		W     float64 `xml:"width,attr"`
		Title string  `xml:"title"`
	} `xml:"rect"`
	Lines []struct {
		X1 float64 `xml:"x1,attr"`
	} `xml:"line"`
	Texts []string `xml:"text"`
}

func render(t *testing.T, files ...string) parsedSVG {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.svg")
	if err := run(files, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc parsedSVG
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, b)
	}
	return doc
}

// TestPlotFixture draws testdata/fixture.json (made-up ratios, named as a
// fixture) and reads the SVG back: one bar per ratio, as long as its ratio
// against the scale, labelled as the benchmarks print it, and the 1× line.
func TestPlotFixture(t *testing.T) {
	doc := render(t, "testdata/fixture.json")
	want := []struct {
		title string
		ratio float64
	}{
		{"a / b, connections/s: 0.50×", 0.5},
		{"a / b, requests/s (keep-alive): 1.25×", 1.25},
		{"c / <d>, Gbit/s (one stream): 2.20×", 2.2},
	}
	if len(doc.Rects) != len(want) {
		t.Fatalf("%d bars, want %d", len(doc.Rects), len(want))
	}
	const top = 2.5 // 2.2 rounded up to a half
	for i, w := range want {
		r := doc.Rects[i]
		if r.Title != w.title {
			t.Errorf("bar %d: title %q, want %q", i, r.Title, w.title)
		}
		if got, exp := r.W, w.ratio/top*(barRight-barLeft); math.Abs(got-exp) > 0.001 {
			t.Errorf("bar %d (%s): width %v, want %v", i, w.title, got, exp)
		}
		label := strconv.FormatFloat(w.ratio, 'f', 2, 64) + "×"
		if !slices.Contains(doc.Texts, label) {
			t.Errorf("no label %q among %q", label, doc.Texts)
		}
	}
	if len(doc.Lines) != 1 || math.Abs(doc.Lines[0].X1-(barLeft+1/top*(barRight-barLeft))) > 0.001 {
		t.Errorf("lines %+v, want one at 1×", doc.Lines)
	}
	for _, s := range []string{"a test fixture, not a measurement", "c / <d>", "1×"} {
		if !slices.Contains(doc.Texts, s) {
			t.Errorf("no text %q among %q", s, doc.Texts)
		}
	}
	if !strings.Contains(doc.Texts[0], "2000-01-01T00:00:00Z") || !strings.Contains(doc.Texts[0], "load average 0.00 0.00 0.00") {
		t.Errorf("title %q lacks the date or the load", doc.Texts[0])
	}
}

// TestPlotTwoReports: each report is a section with its own 1× line.
func TestPlotTwoReports(t *testing.T) {
	doc := render(t, "testdata/fixture.json", "testdata/fixture.json")
	if len(doc.Rects) != 6 || len(doc.Lines) != 2 {
		t.Errorf("%d bars and %d lines, want 6 and 2", len(doc.Rects), len(doc.Lines))
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
	r := report{Bench: "b", Command: `x -json "a&b"`, Ratios: []group{{Name: "<a> / b", Values: []value{{Metric: "m", Ratio: 1}}}}}
	if err := writeSVG(&b, []report{r}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<a>") || !strings.Contains(b.String(), "&lt;a&gt; / b") {
		t.Errorf("the name is not escaped:\n%s", b.String())
	}
}
