package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/doccheck"
)

// The reference and the plots it shows, from this package's directory.
const (
	reference = "../../docs/benchmarks.md"
	plotsDir  = "../../docs/benchmarks"
)

// imageLink is a Markdown image: ![alt](path).
var imageLink = regexp.MustCompile(`!\[[^\]]*\]\(([^)\s]+)\)`)

// maxReferenceLines is the reference's length limit: a reader who
// wants today's figures must not have to dig; the rounds' journals, one file
// per subject in docs/benchmarks/, hold the rest.
const maxReferenceLines = 600

// TestReferenceLinks: docs/benchmarks.md stays a reference (at most 600
// lines), every file it links to (the journals, the plots, the code) exists
// and every section it links to is one of its headings; every journal in
// docs/benchmarks/ is linked from it.
func TestReferenceLinks(t *testing.T) {
	doc, err := os.ReadFile(reference)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(doc, []byte("\n")); n > maxReferenceLines {
		t.Errorf("%s has %d lines, more than %d: move rounds to its journals in %s", reference, n, maxReferenceLines, plotsDir)
	}
	sections := doccheck.Anchors(string(doc))
	linked := map[string]bool{}
	for _, l := range doccheck.Links(string(doc)) {
		if l.Target == "" && l.Fragment != "" && !sections[l.Fragment] {
			t.Errorf("%s links to #%s, which is none of its sections", reference, l.Fragment)
		}
		if l.Target == "" || !l.Relative() {
			continue // a section of this page, or a web page
		}
		file := filepath.Clean(filepath.Join(filepath.Dir(reference), l.Target))
		if _, err := os.Stat(file); err != nil {
			t.Errorf("%s links to %s: %v", reference, l.Target, err)
		}
		linked[file] = true
	}
	journals, err := filepath.Glob(filepath.Join(plotsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(journals) == 0 {
		t.Fatalf("no journal in %s", plotsDir)
	}
	for _, j := range journals {
		if !linked[filepath.Clean(j)] {
			t.Errorf("%s does not link to the journal %s", reference, j)
		}
	}
}

// TestReferencePlots: every image docs/benchmarks.md shows exists; every SVG
// in docs/benchmarks/ is shown there and is what bench/plot draws from the
// JSON beside it, byte for byte (drawn again here): a plot edited by hand, or
// left behind by a newer run's JSON, fails. checkPlot then reads each one
// back against its JSON, bar by bar.
func TestReferencePlots(t *testing.T) {
	doc, err := os.ReadFile(reference)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, m := range imageLink.FindAllStringSubmatch(string(doc), -1) {
		file := filepath.Join(filepath.Dir(reference), m[1])
		if _, err := os.Stat(file); err != nil {
			t.Errorf("%s shows %s: %v", reference, m[1], err)
		}
		shown[filepath.Clean(file)] = true
	}
	svgs, err := filepath.Glob(filepath.Join(plotsDir, "*.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(svgs) == 0 || len(shown) == 0 {
		t.Fatalf("%d plots in %s, %d images in %s: the reference shows no plot", len(svgs), plotsDir, len(shown), reference)
	}
	for _, svg := range svgs {
		t.Run(filepath.Base(svg), func(t *testing.T) {
			if !shown[filepath.Clean(svg)] {
				t.Errorf("%s does not show %s", reference, svg)
			}
			committed, err := os.ReadFile(svg)
			if err != nil {
				t.Fatal(err)
			}
			jsonFile := strings.TrimSuffix(svg, ".svg") + ".json"
			if _, err := os.Stat(jsonFile); err != nil {
				t.Fatalf("%s has no report beside it: %v", svg, err)
			}
			parsed, drawn := render(t, jsonFile)
			if !bytes.Equal(committed, drawn) {
				t.Errorf("%s is not what bench/plot draws from %s: run make bench-plots", svg, jsonFile)
			}
			checkPlot(t, parsed, readReports(t, jsonFile))
		})
	}
}
