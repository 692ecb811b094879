package nftables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// parseComponent reads one expression at toks[i]: ip|ip6 saddr|daddr, meta l4proto,
// th|tcp|udp|sctp dport|sport, mark [and MASK], meta mark [and MASK], ct state,
// fib daddr|saddr type, numgen random mod N.
func parseComponent(toks []token, i int) (component, int, error) {
	w := func(k int) string {
		if i+k < len(toks) {
			return toks[i+k].word
		}
		return ""
	}
	switch {
	case (w(0) == "ip" || w(0) == "ip6") && (w(1) == "saddr" || w(1) == "daddr"):
		return component{kind: w(1)}, i + 2, nil
	case w(0) == "meta" && w(1) == "l4proto":
		return component{kind: "l4proto"}, i + 2, nil
	case (w(0) == "th" || w(0) == "tcp" || w(0) == "udp" || w(0) == "sctp") && (w(1) == "dport" || w(1) == "sport"):
		c := component{kind: w(1)}
		if w(0) != "th" {
			c.proto = w(0)
		}
		return c, i + 2, nil
	case w(0) == "mark" || (w(0) == "meta" && w(1) == "mark"):
		if w(0) == "meta" {
			i++
		}
		c := component{kind: "mark", mask: ^uint32(0)}
		if w(1) == "and" || w(1) == "&" {
			m, err := parseUint32(w(2))
			if err != nil {
				return c, 0, err
			}
			c.mask = m
			return c, i + 3, nil
		}
		return c, i + 1, nil
	case w(0) == "ct" && w(1) == "state":
		return component{kind: "ctstate"}, i + 2, nil
	case w(0) == "fib" && (w(1) == "daddr" || w(1) == "saddr") && w(2) == "type":
		return component{kind: "fib" + w(1)}, i + 3, nil
	case w(0) == "numgen" && w(1) == "random" && w(2) == "mod":
		n, err := strconv.Atoi(w(3))
		if err != nil || n < 1 {
			return component{}, 0, fmt.Errorf("numgen random mod %q", w(3))
		}
		return component{kind: "numgen", mod: n}, i + 4, nil
	}
	return component{}, 0, fmt.Errorf("expression at %q is not modelled by the tracer", w(0))
}

// match evaluates a match (an expression, then "vmap MAP", "@SET", or an optional
// == / != and a value). It returns whether it holds, the verdict of a vmap, the index
// after it, and a note for the trace.
func (w *walker) match(toks []token, i int) (ok bool, v verdict, next int, note string, err error) {
	var key []component
	for {
		c, j, err := parseComponent(toks, i)
		if err != nil {
			return false, v, 0, "", err
		}
		key = append(key, c)
		i = j
		if i < len(toks) && toks[i].word == "." {
			i++
			continue
		}
		break
	}
	if i >= len(toks) {
		return false, v, 0, "", fmt.Errorf("expression without a value")
	}
	t := toks[i]
	switch {
	case t.word == "vmap":
		if i+1 >= len(toks) {
			return false, v, 0, "", fmt.Errorf("vmap without a map")
		}
		return w.vmap(key, toks[i+1])
	case strings.HasPrefix(t.word, "@") && len(key) > 1:
		ok, err := w.inConcatSet(strings.TrimPrefix(t.word, "@"), key)
		return ok, v, i + 1, "", err
	case strings.HasPrefix(t.word, "@"):
		if key[0].kind != "saddr" && key[0].kind != "daddr" {
			return false, v, 0, "", fmt.Errorf("set lookups are modelled for ip|ip6 saddr and daddr, and concatenations")
		}
		ok, err := w.inSet(strings.TrimPrefix(t.word, "@"), w.addr(key[0]))
		return ok, v, i + 1, "", err
	}
	if len(key) != 1 {
		return false, v, 0, "", fmt.Errorf("a concatenation needs vmap or a set")
	}
	neg := false
	if t.word == "==" || t.word == "!=" {
		neg = t.word == "!="
		i++
		if i >= len(toks) {
			return false, v, 0, "", fmt.Errorf("%s without a value", t.word)
		}
		t = toks[i]
	}
	c := key[0]
	if c.kind == "numgen" {
		n, err := strconv.Atoi(t.word)
		if err != nil {
			return false, v, 0, "", fmt.Errorf("numgen compared with %q", t.word)
		}
		p := 0.0
		if n >= 0 && n < c.mod {
			p = 1 / float64(c.mod)
		}
		if neg {
			p = 1 - p
		}
		taken := w.choose(p)
		note = fmt.Sprintf("random: taken (p=%.4g)", p)
		if !taken {
			note = fmt.Sprintf("random: not taken (p=%.4g)", 1-p)
		}
		return taken, v, i + 1, note, nil
	}
	ok, err = w.valueMatches(c, t)
	if err != nil {
		return false, v, 0, "", err
	}
	return ok != neg, v, i + 1, "", nil
}

// choose makes a random choice with probability p and records it.
func (w *walker) choose(p float64) bool {
	taken := w.decide(p)
	if taken {
		w.tr.Probability *= p
	} else {
		w.tr.Probability *= 1 - p
	}
	return taken
}

// valueMatches compares one component of the packet with a value: a word, or a
// "{ ... }" group that matches when any element does.
func (w *walker) valueMatches(c component, t token) (bool, error) {
	if t.group != nil {
		for _, e := range t.group {
			if len(e) != 1 {
				return false, fmt.Errorf("set element %v: want one value", e)
			}
			ok, err := w.wordMatches(c, e[0].word)
			if err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	}
	return w.wordMatches(c, t.word)
}

// wordMatches compares one component of the packet with one value as nft writes it.
func (w *walker) wordMatches(c component, s string) (bool, error) {
	if c.proto != "" && c.proto != w.proto {
		return false, nil
	}
	switch c.kind {
	case "saddr", "daddr":
		return addrMatches(s, w.addr(c))
	case "l4proto":
		return s == w.proto, nil
	case "dport", "sport":
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return false, fmt.Errorf("port %q", s)
		}
		port := w.dst.Port()
		if c.kind == "sport" {
			port = w.pkt.SrcPort
		}
		return uint16(n) == port, nil
	case "mark":
		v, err := parseUint32(s)
		return w.mark&c.mask == v, err
	case "ctstate":
		for _, st := range strings.Split(s, ",") {
			if st == w.state {
				return true, nil
			}
		}
		return false, nil
	case "fibdaddr", "fibsaddr":
		if s != "local" {
			return false, fmt.Errorf("fib type %q is not modelled", s)
		}
		a := w.dst.Addr()
		if c.kind == "fibsaddr" {
			a = w.src
		}
		return w.f.isLocal(a), nil
	}
	return false, fmt.Errorf("%s cannot be compared with a value", c.kind)
}

func (w *walker) addr(c component) netip.Addr {
	if c.kind == "saddr" {
		return w.src
	}
	return w.dst.Addr()
}

// addrMatches: an address equals, a prefix contains, a range a-b spans.
func addrMatches(s string, a netip.Addr) (bool, error) {
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		l, err1 := netip.ParseAddr(lo)
		h, err2 := netip.ParseAddr(hi)
		if err1 != nil || err2 != nil {
			return false, fmt.Errorf("address range %q", s)
		}
		return l.Compare(a) <= 0 && a.Compare(h) <= 0, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return false, fmt.Errorf("prefix %q", s)
		}
		return p.Contains(a), nil
	}
	b, err := netip.ParseAddr(s)
	if err != nil {
		return false, fmt.Errorf("address %q", s)
	}
	return a == b, nil
}

// inSet looks an address up in a set: its elements, or, for a dynamic set, the
// entries packets have added and that have not timed out.
func (w *walker) inSet(name string, a netip.Addr) (bool, error) {
	s := w.t.Sets[name]
	if s == nil {
		return false, fmt.Errorf("set %s does not exist", name)
	}
	for _, e := range s.Elements {
		if len(e.Key) != 1 {
			return false, fmt.Errorf("set %s: element %v: want one value", name, e.Key)
		}
		if ok, err := addrMatches(e.Key[0], a); ok || err != nil {
			return ok, err
		}
	}
	last, ok := w.dyn[name][a]
	if !ok {
		return false, nil
	}
	if s.Timeout != nil && w.now.Sub(last) > *s.Timeout {
		delete(w.dyn[name], a) // expired: the kernel's garbage collector removes it
		return false, nil
	}
	return true, nil
}

// inConcatSet looks a concatenated key (`ip saddr . ip daddr @hairpin`) up in a
// set's elements, part by part.
func (w *walker) inConcatSet(name string, key []component) (bool, error) {
	s := w.t.Sets[name]
	if s == nil {
		return false, fmt.Errorf("set %s does not exist", name)
	}
	for _, e := range s.Elements {
		if len(e.Key) != len(key) {
			return false, fmt.Errorf("set %s: element %v has %d parts, the key %d", name, e.Key, len(e.Key), len(key))
		}
		hit := true
		for i, c := range key {
			ok, err := w.wordMatches(c, e.Key[i])
			if err != nil {
				return false, err
			}
			hit = hit && ok
		}
		if hit {
			return true, nil
		}
	}
	return false, nil
}

// vmap looks the key up in a verdict map (named, or an anonymous "{ k : v, ... }").
// No element: the rule does not match.
func (w *walker) vmap(key []component, m token) (bool, verdict, int, string, error) {
	type elem struct{ key, value []string }
	var elems []elem
	switch {
	case m.group != nil:
		for _, e := range m.group {
			var k, v []string
			seen := false
			for _, t := range e {
				switch {
				case t.word == ":":
					seen = true
				case t.word == ".":
				case seen:
					v = append(v, t.word)
				default:
					k = append(k, t.word)
				}
			}
			elems = append(elems, elem{k, v})
		}
	case strings.HasPrefix(m.word, "@"):
		mp := w.t.Maps[strings.TrimPrefix(m.word, "@")]
		if mp == nil {
			return false, verdict{}, 0, "", fmt.Errorf("map %s does not exist", m.word)
		}
		for _, e := range mp.Elements {
			elems = append(elems, elem{e.Key, strings.Fields(strings.Join(e.Value, " "))})
		}
	default:
		return false, verdict{}, 0, "", fmt.Errorf("vmap %q: want @MAP or { ... }", m.word)
	}
	for _, e := range elems {
		if len(e.key) != len(key) {
			return false, verdict{}, 0, "", fmt.Errorf("map %s: element %v has %d parts, the key %d", m, e.key, len(e.key), len(key))
		}
		hit := true
		for i, c := range key {
			ok, err := w.wordMatches(c, e.key[i])
			if err != nil {
				return false, verdict{}, 0, "", err
			}
			hit = hit && ok
		}
		if !hit {
			continue
		}
		note := strings.Join(e.key, " . ") + " : " + strings.Join(e.value, " ")
		switch {
		case len(e.value) == 2 && (e.value[0] == "goto" || e.value[0] == "jump"):
			return true, verdict{kind: e.value[0], chain: e.value[1]}, 0, note, nil
		case len(e.value) == 1 && (e.value[0] == "accept" || e.value[0] == "drop" || e.value[0] == "return"):
			return true, verdict{kind: e.value[0]}, 0, note, nil
		}
		return false, verdict{}, 0, "", fmt.Errorf("map %s: element value %v is not a verdict", m, e.value)
	}
	return false, verdict{}, 0, "", nil
}

func parseUint32(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("number %q", s)
	}
	return uint32(n), nil
}
