package tutorial

import (
	"regexp"
	"strings"
)

var (
	digits = regexp.MustCompile(`[0-9]+`)
	blocks = regexp.MustCompile(`█+`)
	spaces = regexp.MustCompile(`\s+`)
)

// Normalize keeps what a tutorial can promise of a line: numbers (ports,
// counts, addresses' last parts, times) and bar lengths vary from run to run,
// and so does the width of a column. Bars are svclab traffic's "████" and
// its timeline's "uuuukkk" (a word of only u, k, ? and x: one character per
// answer by path), each run of one character kept once.
func Normalize(s string) string {
	s = digits.ReplaceAllString(s, "N")
	s = blocks.ReplaceAllString(s, "█")
	s = strings.TrimSpace(spaces.ReplaceAllString(s, " "))
	return timelineBars.ReplaceAllStringFunc(s, squeeze)
}

// timelineBars are the words of svclab traffic --timeline's bars.
var timelineBars = regexp.MustCompile(`(^|\s)[uk?x]{2,}($|\s)`)

// squeeze keeps one character of each run: "uuukkk " is "uk ".
func squeeze(s string) string {
	var b strings.Builder
	var last rune
	for i, r := range s {
		if i == 0 || r != last {
			b.WriteRune(r)
		}
		last = r
	}
	return b.String()
}

// lineMatches compares normalized lines; "..." in an expected line stands for
// any text there: a chain name's hash at the end, a log line's time at the
// start, a reason at the end.
func lineMatches(got, want string) bool {
	parts := strings.Split(want, "...")
	if len(parts) == 1 {
		return got == want
	}
	rest, ok := strings.CutPrefix(got, parts[0])
	if !ok {
		return false
	}
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return strings.HasSuffix(rest, last)
}

// Missing returns the first expected line (normalized) that out lacks, in
// order, and false when every line is there. Empty and "..." lines stand for
// anything.
func Missing(expect []string, out string) (string, bool) {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		got = append(got, Normalize(l))
	}
	i := 0
	for _, e := range expect {
		e = Normalize(e)
		if e == "" || e == "..." {
			continue
		}
		for i < len(got) && !lineMatches(got[i], e) {
			i++
		}
		if i == len(got) {
			return e, true
		}
		i++
	}
	return "", false
}
