package nftables

import (
	"io"
	"strings"
)

// chainBlocks rewrites an nft -f transaction so that the rules added to one chain
// are written in one chain block: the lines
//
//	add rule ip svcproxy service-X numgen random mod 2 == 0 goto endpoint-A
//	add rule ip svcproxy service-X goto endpoint-B
//
// become
//
//	add chain ip svcproxy service-X { numgen random mod 2 == 0 goto endpoint-A ; goto endpoint-B ; }
//
// which the kernel receives as the same NEWRULE messages, in the same order. Why:
// before it sends a transaction that has an `add rule`, nft 1.0.6 (Debian 12)
// dumps every chain of every table in the namespace into its cache, to check the
// rule's chain; a chain block needs only the table. At 10,000 service ports the
// dump of their 40,000 chains is ~0.3 s of a one-Service change, and grows with
// the table (docs/benchmarks.md).
//
// Elements likewise: nft 1.0.6 lists every chain before an `add element`, but not
// before a set declared with its elements. A declaration of a set or map followed
// by elements for it,
//
//	add set ip svcproxy hairpin { type ipv4_addr . ipv4_addr ; }
//	add element ip svcproxy hairpin { 198.19.1.10 . 198.19.1.10 }
//
// becomes `add set ip svcproxy hairpin { type ipv4_addr . ipv4_addr ; elements = {
// 198.19.1.10 . 198.19.1.10 } ; }`: the same NEWSET (which changes nothing in an
// existing set of that type) and NEWSETELEM messages. Every `delete` and an `add
// element` without a declaration before it still fetch the chains: nft 1.0.6 has
// no form of them that does not.
//
// A rule that names a set, map or named counter (`@affinity-X`, `counter name
// "connections-X"`) resolves it in nft's cache, which a chain block does not load:
// such a run of rules is written as a block only when the transaction declares
// every object it names (as a full sync and a port's own sets do); otherwise its
// lines are left as they were.
//
// Only runs of consecutive `add rule` lines for one chain are joined, so nothing
// moves past a flush, a delete or another chain's rules: the rewritten
// transaction does what the original does.
func chainBlocks(text string) string {
	var b strings.Builder
	b.Grow(len(text))
	writeChainBlocks(&b, text)
	return b.String()
}

// writeChainBlocks writes chainBlocks(text) to w as it goes: a full sync's
// transaction (about 7 MB at 10,000 service ports) is not copied a second
// time into memory on its way to nft's input. A write error is w's to keep
// (a bufio.Writer's, or the pipe's, which the caller sees when nft ends).
func writeChainBlocks(w io.StringWriter, text string) {
	writeChainBlocksAfter(w, text, map[string]bool{})
}

// writeChainBlocksAfter is writeChainBlocks for one part of a transaction
// written in parts: declared holds the sets, maps and counters the parts
// before it declared, and gets this part's added, so that a rule may name
// an object an earlier part declared.
func writeChainBlocksAfter(w io.StringWriter, text string, declared map[string]bool) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	addDeclaredNames(declared, lines)
	var elems, rules []string // reused from block to block
	for i := 0; i < len(lines); {
		if kind, name, body, ok := splitSetDecl(lines[i]); ok {
			elems = elems[:0]
			j := i + 1
			for ; j < len(lines); j++ {
				e, ok := strings.CutPrefix(lines[j], "add element "+name+" { ")
				if !ok || !strings.HasSuffix(e, " }") {
					break
				}
				elems = append(elems, strings.TrimSuffix(e, " }"))
			}
			if len(elems) > 0 {
				writeAll(w, "add ", kind, " ", name, " { ", body, " ; elements = { ")
				writeJoined(w, elems, ", ")
				w.WriteString(" } ; }\n")
				i = j
				continue
			}
		}
		head, rule, ok := splitAddRule(lines[i])
		if !ok {
			writeAll(w, lines[i], "\n")
			i++
			continue
		}
		// The run: consecutive rules for the same chain.
		rules = append(rules[:0], rule)
		j, resolvable := i+1, refsDeclared(rule, declared)
		for ; j < len(lines); j++ {
			h, r, ok := splitAddRule(lines[j])
			if !ok || h != head {
				break
			}
			rules = append(rules, r)
			resolvable = resolvable && refsDeclared(r, declared)
		}
		if !resolvable {
			for _, l := range lines[i:j] {
				writeAll(w, l, "\n")
			}
		} else {
			writeAll(w, "add chain ", head, " { ")
			writeJoined(w, rules, " ; ")
			w.WriteString(" ; }\n")
		}
		i = j
	}
}

// writeAll writes each of parts to w.
func writeAll(w io.StringWriter, parts ...string) {
	for _, p := range parts {
		w.WriteString(p)
	}
}

// writeJoined writes strings.Join(elems, sep) to w without making it.
func writeJoined(w io.StringWriter, elems []string, sep string) {
	for k, e := range elems {
		if k > 0 {
			w.WriteString(sep)
		}
		w.WriteString(e)
	}
}

// splitSetDecl splits "add set|map FAMILY TABLE NAME { BODY ; }" into "set" or
// "map", "FAMILY TABLE NAME" and BODY. A declaration that already has elements is
// not split.
func splitSetDecl(line string) (kind, name, body string, ok bool) {
	rest, found := strings.CutPrefix(line, "add ")
	if !found {
		return "", "", "", false
	}
	kind, rest, _ = strings.Cut(rest, " ")
	if kind != "set" && kind != "map" {
		return "", "", "", false
	}
	name, body, found = cutFields(rest, 3)
	if !found || !strings.HasPrefix(body, "{ ") || !strings.HasSuffix(body, " ; }") {
		return "", "", "", false
	}
	body = body[len("{ ") : len(body)-len(" ; }")]
	if strings.Contains(body, "elements") {
		return "", "", "", false
	}
	return kind, name, body, true
}

// cutFields cuts s after its first n space-separated words, none of them empty.
func cutFields(s string, n int) (head, rest string, ok bool) {
	i := 0
	for range n {
		j := strings.IndexByte(s[i:], ' ')
		if j <= 0 {
			return "", "", false
		}
		i += j + 1
	}
	return s[:i-1], s[i:], true
}

// splitAddRule splits "add rule FAMILY TABLE CHAIN RULE" into "FAMILY TABLE CHAIN"
// and RULE. Rules with a position (`index`, `handle`) and rules with a `;` (which a
// block would read as two) are not split.
func splitAddRule(line string) (head, rule string, ok bool) {
	rest, ok := strings.CutPrefix(line, "add rule ")
	if !ok {
		return "", "", false
	}
	f := strings.SplitN(rest, " ", 4)
	if len(f) != 4 || f[3] == "" || strings.Contains(f[3], ";") {
		return "", "", false
	}
	if strings.HasPrefix(f[3], "index ") || strings.HasPrefix(f[3], "handle ") || strings.HasPrefix(f[3], "position ") {
		return "", "", false
	}
	return f[0] + " " + f[1] + " " + f[2], f[3], true
}

// addDeclaredNames adds the sets, maps and counters lines declare to out.
func addDeclaredNames(out map[string]bool, lines []string) {
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, "add ")
		if !ok {
			continue
		}
		kind, rest, _ := strings.Cut(rest, " ")
		if kind != "set" && kind != "map" && kind != "counter" {
			continue
		}
		if _, rest, ok = cutFields(rest, 2); ok { // family, table
			name, _, _ := strings.Cut(rest, " ")
			out[name] = true
		}
	}
}

// refsDeclared reports whether every set, map and named counter a rule names
// (`@NAME`, `name "NAME"`) is declared in the transaction. (Called for each rule
// of a full sync: 30,000 at 10,000 service ports, so no regular expressions.)
func refsDeclared(rule string, declared map[string]bool) bool {
	for s := rule; ; {
		i := strings.IndexByte(s, '@')
		if i < 0 {
			break
		}
		s = s[i+1:]
		end := strings.IndexAny(s, " \t,{}")
		if end < 0 {
			end = len(s)
		}
		if end > 0 && !declared[s[:end]] {
			return false
		}
		s = s[end:]
	}
	for s := rule; ; {
		i := strings.Index(s, `name "`)
		if i < 0 {
			return true
		}
		if i > 0 && isWordByte(s[i-1]) { // "xname", not the word name
			s = s[i+len(`name "`):]
			continue
		}
		s = s[i+len(`name "`):]
		end := strings.IndexByte(s, '"')
		if end < 0 || !declared[s[:end]] {
			return false
		}
		s = s[end+1:]
	}
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
