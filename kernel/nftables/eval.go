package nftables

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// verdict is what a rule says: "" (go on with the next rule), accept, drop, reject,
// return, or jump/goto a chain.
type verdict struct{ kind, chain string }

// component is one expression of a match or of a concatenated map key.
type component struct {
	kind  string // saddr, daddr, l4proto, dport, sport, mark, ctstate, fibdaddr, fibsaddr, numgen
	proto string // the protocol "tcp dport" implies
	mask  uint32 // mark and MASK
	mod   int    // numgen random mod N
}

// rule evaluates one rule: its matches left to right, then its statements. A match
// that fails ends the rule with verdict "".
func (w *walker) rule(chain, text string) (verdict, error) {
	toks, err := tokenize(text)
	if err != nil {
		return verdict{}, err
	}
	var notes []string
	step := func(v verdict) verdict {
		w.step(chain, text, strings.Join(notes, "; "))
		return v
	}
	for i := 0; i < len(toks); {
		word := toks[i].word
		arg := func(k int) string {
			if i+k < len(toks) {
				return toks[i+k].word
			}
			return ""
		}
		switch {
		case word == "comment":
			i += 2
		case word == "counter":
			i++
			if arg(0) == "name" { // a named counter: "counter name NAME"
				i += 2
			}
		case word == "accept" || word == "drop" || word == "reject" || word == "return":
			return step(verdict{kind: word}), nil
		case word == "jump" || word == "goto":
			return step(verdict{kind: word, chain: arg(1)}), nil
		case word == "masquerade":
			if w.hook != "postrouting" {
				return verdict{}, fmt.Errorf("masquerade is only valid at postrouting, reached at %s", w.hook)
			}
			w.tr.Masquerade = true
			notes = append(notes, "MASQUERADE")
			return step(verdict{kind: "accept"}), nil
		case word == "dnat":
			if arg(1) != "to" {
				return verdict{}, fmt.Errorf("dnat: want \"dnat to ADDR:PORT\"")
			}
			if w.hook != "prerouting" && w.hook != "output" {
				return verdict{}, fmt.Errorf("dnat is only valid at prerouting and output, reached at %s", w.hook)
			}
			to, err := netip.ParseAddrPort(arg(2))
			if err != nil {
				a, err2 := netip.ParseAddr(arg(2))
				if err2 != nil {
					return verdict{}, fmt.Errorf("dnat to %q: %w", arg(2), err)
				}
				to = netip.AddrPortFrom(a, w.dst.Port())
			}
			w.dst, w.tr.DNAT, w.dnat = to, to, true
			notes = append(notes, "DNAT "+to.String())
			return step(verdict{kind: "accept"}), nil
		case (word == "mark" && arg(1) == "set") || (word == "meta" && arg(1) == "mark" && arg(2) == "set"):
			if word == "meta" {
				i++
			}
			// mark set mark (or|xor) VALUE
			if arg(2) != "mark" && !(arg(2) == "meta" && arg(3) == "mark") {
				return verdict{}, fmt.Errorf("mark set: only \"mark set mark or|xor VALUE\" is modelled")
			}
			if arg(2) == "meta" {
				i++
			}
			v, err := parseUint32(arg(4))
			if err != nil {
				return verdict{}, err
			}
			switch arg(3) {
			case "or", "|":
				w.mark |= v
			case "xor", "^":
				w.mark ^= v
			default:
				return verdict{}, fmt.Errorf("mark set mark %s: not modelled", arg(3))
			}
			notes = append(notes, fmt.Sprintf("mark %#x", w.mark))
			i += 5
		case word == "update" || word == "add":
			set := strings.TrimPrefix(arg(1), "@")
			if i+2 >= len(toks) || toks[i+2].group == nil || (toks[i+2].String() != "{ ip saddr }" && toks[i+2].String() != "{ ip6 saddr }") {
				return verdict{}, fmt.Errorf("%s @%s: only \"{ ip saddr }\" and \"{ ip6 saddr }\" are modelled", word, set)
			}
			if w.dyn[set] == nil {
				w.dyn[set] = map[netip.Addr]time.Time{}
			}
			w.dyn[set][w.src] = w.now
			notes = append(notes, fmt.Sprintf("%s @%s: %s", word, set, w.src))
			i += 3
		default:
			ok, v, next, note, err := w.match(toks, i)
			if err != nil {
				return verdict{}, err
			}
			if note != "" {
				notes = append(notes, note)
			}
			if !ok {
				if strings.HasPrefix(note, "random: not taken") {
					w.step(chain, text, note)
				}
				return verdict{}, nil
			}
			if v.kind != "" {
				return step(v), nil
			}
			i = next
		}
	}
	step(verdict{})
	return verdict{}, nil
}
