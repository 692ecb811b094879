package doccheck

import (
	"go/scanner"
	"go/token"
	"regexp"
	"strings"
)

// A Citation is an issue number a text cites.
type Citation struct {
	Line int
	Text string // what matched: the word "issue" and its number, or '#' and a number
}

// citationRe matches what cites an issue of a tracker the reader does not
// have: the word "issue" or "issues" followed by a number (in any case,
// with or without '#'), and a bare '#' and a number after a space, a
// parenthesis or a bracket. A reference into another
// project's public tracker names the project, "kubernetes/kubernetes#129128",
// and is not matched: it is a thread anyone can open.
var citationRe = regexp.MustCompile(`(?i)\bissues?\s+#?[0-9]+\b|(?:^|[\s(\[,;])#[0-9]+\b`)

// Citations returns the issue numbers text cites, line by line.
func Citations(text string) []Citation {
	var out []Citation
	for i, line := range strings.Split(text, "\n") {
		for _, m := range citationRe.FindAllString(line, -1) {
			out = append(out, Citation{Line: i + 1, Text: strings.TrimSpace(m)})
		}
	}
	return out
}

// CommentCitations returns the issue numbers the comments of a Go source file
// cite, each at its line in the file. Only comments are read: a string such
// as "%#08x" or a colour "#222" is code, not a citation.
func CommentCitations(src []byte) []Citation {
	var s scanner.Scanner
	fset := token.NewFileSet()
	file := fset.AddFile("", fset.Base(), len(src))
	s.Init(file, src, nil, scanner.ScanComments)
	var out []Citation
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		if tok != token.COMMENT {
			continue
		}
		first := fset.Position(pos).Line
		for _, c := range Citations(lit) {
			c.Line += first - 1
			out = append(out, c)
		}
	}
}
