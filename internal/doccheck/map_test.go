package doccheck

import (
	"path/filepath"
	"strings"
	"testing"
)

// mapPage is the map of the house, from root.
const mapPage = "docs/architecture.md"

// mapMaxLines is how long the map may grow: a reader takes it in at one
// sitting. Decisions belong in design.md, figures in benchmarks.md.
const mapMaxLines = 300

// TestMap holds docs/architecture.md to being the map: at most mapMaxLines
// lines, and every product package (a directory of Go files that are not
// tests, outside internal/ and test/) named in its table of rooms (a row's
// first cell with code in it, after the layer), by its path or under a
// "dir/..." row. A package added without a line on the map
// fails here.
func TestMap(t *testing.T) {
	md := read(t, mapPage)
	if n := strings.Count(md, "\n"); n > mapMaxLines {
		t.Errorf("%s has %d lines, at most %d: it is the map; move decisions to design.md, measurements to benchmarks.md", mapPage, n, mapMaxLines)
	}
	rooms := Table(md, "The rooms")
	if len(rooms) == 0 {
		t.Fatalf("%s has no table under \"## The rooms\"", mapPage)
	}
	named := map[string]bool{} // "service", "kernel/..."
	for _, row := range rooms {
		for _, cell := range row { // the room: the first cell with code in it
			if names := CodeSpans(cell); len(names) > 0 {
				for _, name := range names {
					named[name] = true
				}
				break
			}
		}
	}
	packages := productPackages(t)
	for _, pkg := range packages {
		if !onMap(named, pkg) {
			t.Errorf("%s: the rooms' table names no %s, nor a \"dir/...\" above it", mapPage, pkg)
		}
	}
	t.Logf("%d product packages", len(packages))
}

// onMap says whether pkg is named, or lies under a "dir/..." name
// (which names dir too, as Go's package patterns do).
func onMap(named map[string]bool, pkg string) bool {
	if named[pkg] {
		return true
	}
	for p := pkg; p != "."; p = filepath.Dir(p) {
		if named[filepath.ToSlash(p)+"/..."] {
			return true
		}
	}
	return false
}

// productPackages lists the directories under root holding product Go
// source (isProduct), relative to root, with '/' separators.
func productPackages(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, file := range walk(t, ".go") {
		file = filepath.ToSlash(file)
		if !isProduct(file) {
			continue
		}
		if dir := filepath.ToSlash(filepath.Dir(file)); !seen[dir] {
			seen[dir] = true
			out = append(out, dir)
		}
	}
	return out
}

// TestReadingPathEveryMode: docs/reading.md follows a packet through every
// mode the map's table "Which packet takes which path" lists: some step
// names a file of each mode's package.
func TestReadingPathEveryMode(t *testing.T) {
	steps, err := ParseReading(strings.NewReader(read(t, readingPage)))
	if err != nil {
		t.Fatalf("%s: %v", readingPage, err)
	}
	reached := map[string]string{} // package -> the first step that reads a file of it
	for _, s := range steps {
		for _, f := range s.Files {
			if dir := filepath.ToSlash(filepath.Dir(f.Path)); reached[dir] == "" {
				reached[dir] = s.Title
			}
		}
	}
	modes := Table(read(t, mapPage), "Which packet takes which path")
	if len(modes) == 0 {
		t.Fatalf("%s has no table under \"## Which packet takes which path\"", mapPage)
	}
	for _, row := range modes {
		if len(row) < 2 || len(CodeSpans(row[1])) != 1 {
			t.Errorf("%s: the row of mode %q names no package in its second cell", mapPage, row[0])
			continue
		}
		pkg := CodeSpans(row[1])[0]
		if reached[pkg] == "" {
			t.Errorf("%s: no step reads a file of %s, the package of mode %s", readingPage, pkg, row[0])
			continue
		}
		t.Logf("mode %s: %s", row[0], reached[pkg])
	}
}

// TestReadmePointsToReadingPath: the README, the page every reader opens
// first, links the reading path and the map.
func TestReadmePointsToReadingPath(t *testing.T) {
	linked := map[string]bool{}
	for _, l := range Links(read(t, "README.md")) {
		linked[filepath.ToSlash(filepath.Clean(l.Target))] = true
	}
	for _, page := range []string{readingPage, mapPage} {
		if !linked[page] {
			t.Errorf("README.md does not link %s", page)
		}
	}
}
