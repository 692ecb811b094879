package nftables

import (
	"fmt"
	"strings"
)

// token is one word of a rule, or a whole "{ ... }" group (its elements in group,
// split at top-level commas, each element's words).
type token struct {
	word  string
	group [][]token
}

func (t token) String() string {
	if t.group == nil {
		return t.word
	}
	var parts []string
	for _, e := range t.group {
		var ws []string
		for _, w := range e {
			ws = append(ws, w.String())
		}
		parts = append(parts, strings.Join(ws, " "))
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}

// tokenize splits rule text into words, "{ ... }" groups and quoted strings (kept
// with their quotes). nft's own syntax is richer; this is the part svcproxy writes.
func tokenize(s string) ([]token, error) {
	toks, rest, err := tokenizeUntil(s, false)
	if err != nil {
		return nil, err
	}
	if rest != "" {
		return nil, fmt.Errorf("unbalanced }")
	}
	return toks, nil
}

// tokenizeUntil reads tokens until the end of s, or (inGroup) a "}" or ",", which it
// leaves in rest.
func tokenizeUntil(s string, inGroup bool) ([]token, string, error) {
	var out []token
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			if inGroup {
				return nil, "", fmt.Errorf("unterminated {")
			}
			return out, "", nil
		}
		switch s[0] {
		case '}', ',':
			if !inGroup && s[0] == ',' {
				return nil, "", fmt.Errorf("unexpected ,")
			}
			return out, s, nil
		case '{':
			var group [][]token
			s = s[1:]
			for {
				elem, rest, err := tokenizeUntil(s, true)
				if err != nil {
					return nil, "", err
				}
				if len(elem) > 0 {
					group = append(group, elem)
				}
				s = rest[1:]
				if rest[0] == '}' {
					break
				}
			}
			if group == nil {
				group = [][]token{}
			}
			out = append(out, token{group: group})
		case '"':
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return nil, "", fmt.Errorf("unterminated quote")
			}
			out = append(out, token{word: s[:end+2]})
			s = s[end+2:]
		default:
			stop := " \t{}"
			if inGroup {
				stop += ","
			}
			end := strings.IndexAny(s, stop)
			if end < 0 {
				end = len(s)
			}
			out = append(out, token{word: s[:end]})
			s = s[end:]
		}
	}
}
