// Package tracing is what the packet tracers of the kernel Fakes (kernel/iptables,
// kernel/nftables) share: how a trace goes through a rule set's random choices,
// and how it prints.
//
// A rule that matches with a probability (iptables' `-m statistic --mode random`,
// an nftables `numgen random` split) is a branch: a trace either takes it or goes
// on. kube-proxy's layout spreads n endpoints as rules taken with 1/n, 1/(n-1),
// ..., then one unconditional rule, so Pick(i) ends at endpoint i and All visits
// each endpoint once.
package tracing

import (
	"fmt"
	"strings"
)

// Choose decides one branch: true takes the rule, false goes on past it. prob is
// the rule's probability; 0 and 1 are no choice (never and always taken).
type Choose func(prob float64) bool

// Pick goes on past the first n real choices and takes the next one.
func Pick(n int) Choose {
	return func(prob float64) bool {
		if prob <= 0 || prob >= 1 {
			return prob >= 1
		}
		if n > 0 {
			n--
			return false
		}
		return true
	}
}

// MaxPaths bounds All: kube-proxy's layout gives one path per endpoint.
const MaxPaths = 4096

// All calls trace once per way through the choices it meets, depth first (the
// first call takes every branch), and returns what each call returned. trace
// must make the same choices, in the same order, given the same answers. An
// error of trace ends All with the results so far.
func All[T any](trace func(Choose) (T, error)) ([]T, error) {
	var out []T
	var prefix []bool // the answers of the next path, up to its last change
	for {
		var made, forced []bool
		res, err := trace(func(prob float64) bool {
			i := len(made)
			d := true
			if i < len(prefix) {
				d = prefix[i]
			}
			if prob <= 0 || prob >= 1 {
				d = prob >= 1
			}
			made = append(made, d)
			forced = append(forced, prob <= 0 || prob >= 1)
			return d
		})
		if err != nil {
			return out, err
		}
		out = append(out, res)
		if len(out) > MaxPaths {
			return out, fmt.Errorf("trace: more than %d paths", MaxPaths)
		}
		// Backtrack to the last choice taken that could have gone the other way.
		j := len(made) - 1
		for j >= 0 && (!made[j] || forced[j]) {
			j--
		}
		if j < 0 {
			return out, nil
		}
		prefix = append(made[:j:j], false)
	}
}

// Line is one step of a trace as it prints: where the packet was (a chain), the
// rule that matched there ("" for a chain's policy or end) and what came of it.
type Line struct{ Where, Rule, Note string }

// Print writes a trace: the packet's header line, then one line per step in
// aligned columns, then the result with the mark (when set) and the path's
// probability (when below 1).
func Print(b *strings.Builder, header string, lines []Line, result string, mark uint32, probability float64) {
	b.WriteString(header + "\n")
	width := 0
	for _, l := range lines {
		width = max(width, len(l.Where))
	}
	for _, l := range lines {
		line := fmt.Sprintf("  %-*s  ", width, l.Where)
		switch {
		case l.Rule == "":
			line += l.Note
		case l.Note == "":
			line += l.Rule
		default:
			line += l.Rule + "  => " + l.Note
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	fmt.Fprintf(b, "result: %s", result)
	if mark != 0 {
		fmt.Fprintf(b, ", mark %#x", mark)
	}
	if probability < 1 {
		fmt.Fprintf(b, " (p=%.4g)", probability)
	}
	b.WriteByte('\n')
}
