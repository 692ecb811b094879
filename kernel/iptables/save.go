package iptables

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Saved is iptables-save output read back: each line of each table with the
// chain it declares or appends to, and, saved with -c, its packet counter.
// Rules keep the text iptables-save printed (Text) and give its words to
// Target and Option.
type Saved struct {
	Tables []Table // in the order saved
	Lines  []SavedLine
}

// SavedLine is one line of a table: a chain's declaration (":NAME POLICY
// [p:b]") or a rule ("-A NAME ..."). Comments and COMMIT lines are left out.
type SavedLine struct {
	Table Table
	// Text is the line as saved, without a rule's counters.
	Text string
	// Chain is the chain the line declares or appends to.
	Chain string
	// Rule says the line is an -A line.
	Rule bool
	// Packets is the rule's packet counter ("[12:720] -A ..." is 12);
	// Counted says it had one (iptables-save -c).
	Packets uint64
	Counted bool

	words []string
}

// counters is a rule's "[packets:bytes] " prefix in iptables-save -c output.
var counters = regexp.MustCompile(`^\[(\d+):(\d+)\] `)

// ParseSave reads iptables-save output (with -c or without). A line it cannot
// split into words (an unterminated quote) is an error naming it.
func ParseSave(save string) (*Saved, error) {
	s := &Saved{}
	table := Table("")
	for i, raw := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(raw, "*"):
			table = Table(strings.TrimPrefix(raw, "*"))
			s.Tables = append(s.Tables, table)
			continue
		case raw == "" || strings.HasPrefix(raw, "#") || raw == "COMMIT":
			continue
		}
		l := SavedLine{Table: table, Text: raw}
		if m := counters.FindStringSubmatch(raw); m != nil {
			l.Packets, _ = strconv.ParseUint(m[1], 10, 64)
			l.Counted, l.Text = true, raw[len(m[0]):]
		}
		words, err := splitLine(l.Text)
		if err != nil {
			return nil, fmt.Errorf("iptables-save line %d %q: %w", i+1, raw, err)
		}
		switch {
		case strings.HasPrefix(l.Text, ":"):
			l.Chain = strings.TrimPrefix(words[0], ":")
		case len(words) >= 2 && words[0] == "-A":
			l.Rule, l.Chain, l.words = true, words[1], words[2:]
		}
		s.Lines = append(s.Lines, l)
	}
	return s, nil
}

// Target is the rule's target, what follows -j ("DNAT", "SVCP-SVC-..."); ""
// for none.
func (l SavedLine) Target() string { return l.Option("-j") }

// Option is the first value of the rule's option name, unquoted:
// Option("--comment") is "default/web:http", Option("--to-destination")
// "198.19.1.10:8080"; "" when the rule has no such option.
func (l SavedLine) Option(name string) string {
	for i, w := range l.words {
		if w == name && i+1 < len(l.words) {
			return l.words[i+1]
		}
	}
	return ""
}
