package doccheck

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// A Link is a Markdown link or image of a page: [text](Target#Fragment).
type Link struct {
	Line     int
	Target   string // a path, a URL, or "" for a section of the same page
	Fragment string // without the '#'; "" when there is none
}

// Relative reports whether the link leads into the repository: not a URL,
// not a mail address.
func (l Link) Relative() bool {
	return !strings.Contains(l.Target, "://") && !strings.HasPrefix(l.Target, "mailto:")
}

var (
	// linkRe is a link's or an image's target: ](path#fragment), with an
	// optional title after a space.
	linkRe = regexp.MustCompile(`\]\(<?([^)\s#>]*)(#[^)\s>]*)?>?(?:\s+"[^"]*")?\)`)
	// codeSpan is inline code, whose text is not a link.
	codeSpan  = regexp.MustCompile("`+[^`]*`+")
	headingRe = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
)

// lines calls f with each line of md outside fenced code blocks, numbered
// from 1.
func lines(md string, f func(n int, line string)) {
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	fence := ""
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = ""
		case fence == "":
			f(n, line)
		}
	}
}

// Links returns the links and images of md, in order, outside code blocks
// and code spans.
func Links(md string) []Link {
	var out []Link
	lines(md, func(n int, line string) {
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range linkRe.FindAllStringSubmatch(line, -1) {
			out = append(out, Link{Line: n, Target: m[1], Fragment: strings.TrimPrefix(m[2], "#")})
		}
	})
	return out
}

// Anchors returns the anchors GitHub makes of md's headings: Slug of each,
// a repeated one numbered "-1", "-2", ... as GitHub numbers them.
func Anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines(md, func(_ int, line string) {
		m := headingRe.FindStringSubmatch(line)
		if m == nil {
			return
		}
		s := Slug(m[1])
		if k := seen[s]; k > 0 {
			out[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	})
	return out
}

// Slug is a heading's anchor as GitHub makes it: lower case, letters,
// digits, '-' and '_' kept, spaces made '-', everything else dropped
// (backquotes, colons, dots, dashes other than '-').
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// Table returns the rows of the first table under the heading whose text is
// heading (at any level), each row its cells with the spaces around them
// trimmed; the header row and the line under it are left out. It returns nil
// when there is no such heading or no table before the next heading.
func Table(md, heading string) [][]string {
	var (
		rows            [][]string
		in, done, table bool
	)
	lines(md, func(_ int, line string) {
		if done {
			return
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			if in {
				done = true
			}
			in = m[1] == heading
			return
		}
		if !in {
			return
		}
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "|") {
			done = done || table // the table ended
			return
		}
		if !table { // the header row
			table = true
			return
		}
		if strings.Trim(trimmed, "|-: ") == "" { // the line under the header
			return
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(trimmed, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		rows = append(rows, cells)
	})
	return rows
}

// CodeSpans returns the text of the inline code spans of s, without their
// backquotes: "`hybrid`, `kernel/...`" gives "hybrid" and "kernel/...".
func CodeSpans(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllString(s, -1) {
		out = append(out, strings.Trim(m, "`"))
	}
	return out
}
