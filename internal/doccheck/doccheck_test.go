package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../.."

// markdownFiles are the repository's Markdown pages (README, docs/,
// tutorials/ and every other), relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	return walk(t, ".md")
}

// walk lists the files of root whose names end in ext, leaving out hidden
// directories (.git) and the build's output (bin).
func walk(t *testing.T, ext string) []string {
	t.Helper()
	out := walkFunc(t, func(rel string) bool { return strings.HasSuffix(rel, ext) })
	if len(out) == 0 {
		t.Fatalf("no %s files under %s", ext, root)
	}
	return out
}

// walkFunc lists the files of root, relative to it, for which keep is
// true, leaving out hidden directories (.git) and the build's output (bin).
func walkFunc(t *testing.T, keep func(rel string) bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if keep(rel) {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLinks: every relative link of every Markdown page leads to a file or
// directory that exists, and a link to a section (page.md#section, or
// #section on the same page) to one of that page's headings. A page moved,
// renamed or split breaks here, not in a reader's browser.
func TestLinks(t *testing.T) {
	anchors := map[string]map[string]bool{} // page -> its anchors
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := anchors[rel]; ok {
			return a
		}
		anchors[rel] = Anchors(read(t, rel))
		return anchors[rel]
	}
	n := 0
	for _, page := range markdownFiles(t) {
		for _, l := range Links(read(t, page)) {
			if !l.Relative() {
				continue
			}
			n++
			target := page
			if l.Target != "" {
				target = filepath.Join(filepath.Dir(page), l.Target)
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					t.Errorf("%s:%d: link to %s: no such file or directory", page, l.Line, l.Target)
					continue
				}
			}
			if l.Fragment != "" && strings.HasSuffix(target, ".md") && !anchorsOf(target)[l.Fragment] {
				t.Errorf("%s:%d: link to %s#%s: %s has no such heading", page, l.Line, l.Target, l.Fragment, target)
			}
		}
	}
	t.Logf("%d relative links checked", n)
}

// TestTutorialsLinkProduct: every tutorial (tutorials/NN-topic.md) links at
// least one product source file its lesson is about: a Go file that is not a
// test, in a package that is not test support (internal/, test/). A learner
// who has seen a thing happen in the lab should be one click from the code
// that made it happen.
func TestTutorialsLinkProduct(t *testing.T) {
	tutorials, err := filepath.Glob(filepath.Join(root, "tutorials", "[0-9][0-9]-*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tutorials) == 0 {
		t.Fatal("no tutorials")
	}
	for _, path := range tutorials {
		page, _ := filepath.Rel(root, path)
		var product []string
		for _, l := range Links(read(t, page)) {
			file := filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), l.Target)))
			if l.Relative() && isProduct(file) {
				product = append(product, file)
			}
		}
		if len(product) == 0 {
			t.Errorf("%s links no product source file (a .go file outside tests, internal/ and test/)", page)
			continue
		}
		t.Logf("%s: %s", page, strings.Join(slices.Compact(product), ", "))
	}
}

// isProduct says whether file (relative to root) is product Go source.
func isProduct(file string) bool {
	return strings.HasSuffix(file, ".go") && !strings.HasSuffix(file, "_test.go") &&
		!strings.HasPrefix(file, "internal/") && !strings.HasPrefix(file, "test/") &&
		!strings.Contains(file, "/testdata/")
}

// TestNoIssueCitations: no Markdown page, no Go comment and no other text a
// reader meets (the demo's prose, scripts, the Makefile, manifests: textFile)
// cites an issue number (citationRe says what counts): a reader has no
// tracker to open, so a doc says the thing itself. A thread of another project's public tracker
// ("kubernetes/kubernetes#129128") is a reference anyone can open, and
// allowed.
func TestNoIssueCitations(t *testing.T) {
	for _, page := range markdownFiles(t) {
		for _, c := range Citations(read(t, page)) {
			t.Errorf("%s:%d: cites %q: say the thing itself", page, c.Line, c.Text)
		}
	}
	for _, file := range walk(t, ".go") {
		for _, c := range CommentCitations([]byte(read(t, file))) {
			t.Errorf("%s:%d: a comment cites %q: say the thing itself", file, c.Line, c.Text)
		}
	}
	files := append(walkFunc(t, textFile), ".ci/run")
	for _, file := range files {
		for _, c := range Citations(read(t, file)) {
			t.Errorf("%s:%d: cites %q: say the thing itself", file, c.Line, c.Text)
		}
	}
	t.Logf("%d other text files checked", len(files))
}

// textFile says whether a file (relative to root) is text a reader meets
// besides Markdown and Go: prose, scripts, the Makefile, manifests and
// configuration, but not test data (golden files, fuzz corpora).
func textFile(rel string) bool {
	if strings.Contains(filepath.ToSlash(rel), "testdata/") {
		return false
	}
	switch filepath.Ext(rel) {
	case ".txt", ".sh", ".yaml", ".conf":
		return true
	}
	switch filepath.Base(rel) {
	case "Makefile", "Corefile":
		return true
	}
	return false
}
