package tutorial

import (
	"regexp"
	"strings"
)

// What an output block may leave open, and nothing else: everything a run
// cannot change (an address, a count round-robin fixes, a rule's text, a
// chain's hash) must be printed exactly as the block shows it, so that a
// tutorial whose text went stale fails its test.
//
//   - <word> (a lower-case name in angle brackets: <port>, <n>, <pod>,
//     <time>, <cookie>) marks a value that varies from run to run: a port
//     the kernel picks, a count a random choice spreads, a timestamp. It
//     matches any run of non-blank characters there.
//   - "..." within a line stands for any text; a line of only "..." for
//     any lines.
//   - Runs of blanks are one blank: a column is as wide as what is in it.
//   - A bar (svclab traffic's "████", its timeline's "uuuukkk") is as long
//     as its count, which the line shows beside it: each run of one bar
//     character is compared as one.
var (
	blocks      = regexp.MustCompile(`█+`)
	spaces      = regexp.MustCompile(`\s+`)
	placeholder = regexp.MustCompile(`<[a-z][a-z0-9-]*>`)
)

// Normalize is a line as the matcher compares it: blanks collapsed, bars
// squeezed.
func Normalize(s string) string {
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

// pattern compiles an expected line (normalized) into the regular
// expression it stands for: its text literally, each <word> a run of
// non-blanks, each "..." any text.
func pattern(want string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i, part := range strings.Split(want, "...") {
		if i > 0 {
			b.WriteString(".*")
		}
		last := 0
		for _, m := range placeholder.FindAllStringIndex(part, -1) {
			b.WriteString(regexp.QuoteMeta(part[last:m[0]]))
			b.WriteString(`\S+`)
			last = m[1]
		}
		b.WriteString(regexp.QuoteMeta(part[last:]))
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// Mismatch is the first expected line an output lacks.
type Mismatch struct {
	// Want is the expected line, normalized.
	Want string
	// Closest is the output's line most like it (the most characters in
	// common at its start and end), after the lines matched before it:
	// usually the line that went stale. "" when the output has none.
	Closest string
}

// Check returns the first expected line (normalized) that out lacks, in
// order, and false when every line is there. Empty and "..." lines stand
// for anything.
func Check(expect []string, out string) (Mismatch, bool) {
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
		re := pattern(e)
		from := i
		for i < len(got) && !re.MatchString(got[i]) {
			i++
		}
		if i == len(got) {
			return Mismatch{Want: e, Closest: closest(e, got[from:])}, true
		}
		i++
	}
	return Mismatch{}, false
}

// Missing is Check's expected line alone.
func Missing(expect []string, out string) (string, bool) {
	m, missing := Check(expect, out)
	return m.Want, missing
}

// closest is the line of lines sharing the longest start and end with
// want.
func closest(want string, lines []string) string {
	best, score := "", 0
	for _, l := range lines {
		s := common(want, l, false) + common(want, l, true)
		if s > score {
			best, score = l, s
		}
	}
	return best
}

// common counts the characters a and b share at their start (or end).
func common(a, b string, fromEnd bool) int {
	n := 0
	for n < len(a) && n < len(b) {
		i, j := n, n
		if fromEnd {
			i, j = len(a)-1-n, len(b)-1-n
		}
		if a[i] != b[j] {
			break
		}
		n++
	}
	return n
}
