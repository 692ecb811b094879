// Package doccheck reads the repository's Markdown and Go comments the way a
// reader meets them, so that tests can hold the docs to what they promise:
// every relative link leads to a file (and a heading) that exists, every
// tutorial links the product code its lesson is about, no doc or comment
// cites an issue number a reader has no tracker for, docs/architecture.md
// stays a map (short, with every product package on it), and
// docs/reading.md's path through the code reaches every mode and names
// files and functions that exist and commands whose output it shows.
//
// The checks themselves are this package's tests (doccheck_test.go,
// map_test.go, reading_test.go), run by
// `go test ./internal/doccheck`; the functions here are what they need:
//
//	Links(md)          the Markdown links of a page, outside code
//	Anchors(md)        the anchors GitHub makes of a page's headings
//	Citations(text)    the issue numbers a text cites
//	ParseReading(md)   the steps of docs/reading.md
//	Table(md, heading) the rows of the table under a heading
//	CodeSpans(s)       the inline code of a line or a cell
package doccheck
