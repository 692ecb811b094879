package iptables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// pred decides whether a packet (the walker's current view of it) matches.
type pred func(w *walker) (bool, error)

// compileRule checks every modelled match of r and returns one predicate per match;
// an unmodelled module gets a nil predicate, which the tracer reports as an error.
func compileRule(r *rule) ([]pred, error) {
	preds := make([]pred, len(r.matches))
	for i, m := range r.matches {
		switch m.module {
		case "tcp", "udp", "sctp", "multiport":
			if r.proto == nil || r.proto.neg || (m.module != "multiport" && r.proto.name != m.module) {
				return nil, fmt.Errorf("match %s needs -p %s", m.module, protoHint(m.module))
			}
		}
		if _, modelled := moduleOptions[m.module]; !modelled {
			continue
		}
		p, err := compileMatch(m)
		if err != nil {
			return nil, fmt.Errorf("match %s: %w", m.module, err)
		}
		preds[i] = p
	}
	return preds, nil
}

func protoHint(module string) string {
	if module == "multiport" {
		return "tcp, udp or sctp"
	}
	return module
}

func compileMatch(m *match) (pred, error) {
	switch m.module {
	case "comment":
		return func(*walker) (bool, error) { return true, nil }, nil
	case "tcp", "udp", "sctp", "multiport":
		return compilePorts(m)
	case "addrtype":
		return compileAddrtype(m)
	case "statistic":
		return compileStatistic(m)
	case "mark":
		return compileMarkMatch(m)
	case "set":
		return compileSet(m)
	case "conntrack", "state":
		return compileState(m)
	case "recent":
		return compileRecent(m)
	}
	return nil, fmt.Errorf("not modelled")
}

// all combines per-option tests: the match holds when every option holds (each one
// inverted by its "!").
func all(tests []func(w *walker) (bool, error), negs []bool) pred {
	return func(w *walker) (bool, error) {
		for i, t := range tests {
			ok, err := t(w)
			if err != nil {
				return false, err
			}
			if ok == negs[i] {
				return false, nil
			}
		}
		return true, nil
	}
}

func compilePorts(m *match) (pred, error) {
	var tests []func(*walker) (bool, error)
	var negs []bool
	for _, o := range m.opts {
		if o.name == "--tcp-flags" {
			t, err := compileTCPFlags(o.values[0], o.values[1])
			if err != nil {
				return nil, err
			}
			tests = append(tests, t)
			negs = append(negs, o.neg)
			continue
		}
		ranges, err := parsePortList(o.values[0], m.module == "multiport")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.name, err)
		}
		name := o.name
		tests = append(tests, func(w *walker) (bool, error) {
			for _, r := range ranges {
				d, s := w.dst.Port(), w.sport
				if (name != "--sport" && name != "--sports" && r.has(d)) ||
					(name != "--dport" && name != "--dports" && r.has(s)) {
					return true, nil
				}
			}
			return false, nil
		})
		negs = append(negs, o.neg)
	}
	return all(tests, negs), nil
}

// compileTCPFlags models --tcp-flags MASK COMP (and --syn, its shorthand) for the
// packets the tracer sends: a NEW packet is a SYN, any other an ACK.
func compileTCPFlags(mask, comp string) (func(*walker) (bool, error), error) {
	bits := map[string]int{"FIN": 1, "SYN": 2, "RST": 4, "PSH": 8, "ACK": 16, "URG": 32, "ALL": 63, "NONE": 0}
	parse := func(s string) (int, error) {
		n := 0
		for _, f := range strings.Split(s, ",") {
			b, ok := bits[f]
			if !ok {
				return 0, fmt.Errorf("--tcp-flags: unknown flag %q", f)
			}
			n |= b
		}
		return n, nil
	}
	m, err := parse(mask)
	if err != nil {
		return nil, err
	}
	c, err := parse(comp)
	if err != nil {
		return nil, err
	}
	return func(w *walker) (bool, error) {
		flags := bits["ACK"]
		if w.state == "NEW" {
			flags = bits["SYN"]
		}
		return flags&m == c, nil
	}, nil
}

type portRange struct{ lo, hi uint16 }

func (r portRange) has(p uint16) bool { return p >= r.lo && p <= r.hi }

// parsePortList parses "80", "1000:2000" and, for multiport, comma lists of those.
func parsePortList(s string, list bool) ([]portRange, error) {
	parts := []string{s}
	if list {
		parts = strings.Split(s, ",")
	}
	var out []portRange
	for _, p := range parts {
		lo, hi, isRange := strings.Cut(p, ":")
		l, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%q: not a port", s)
		}
		h := l
		if isRange {
			if h, err = strconv.ParseUint(hi, 10, 16); err != nil || h < l {
				return nil, fmt.Errorf("%q: not a port range", s)
			}
		}
		out = append(out, portRange{uint16(l), uint16(h)})
	}
	return out, nil
}

func compileAddrtype(m *match) (pred, error) {
	var tests []func(*walker) (bool, error)
	var negs []bool
	for _, o := range m.opts {
		types := strings.Split(o.values[0], ",")
		for _, t := range types {
			if t != "LOCAL" && t != "UNICAST" && t != "MULTICAST" {
				return nil, fmt.Errorf("%s %s: only LOCAL, UNICAST and MULTICAST are modelled", o.name, t)
			}
		}
		dst := o.name == "--dst-type"
		tests = append(tests, func(w *walker) (bool, error) {
			a := w.src
			if dst {
				a = w.dst.Addr()
			}
			for _, t := range types {
				local := w.f.isLocal(a)
				if (t == "LOCAL" && local) || (t == "MULTICAST" && a.IsMulticast()) ||
					(t == "UNICAST" && !local && !a.IsMulticast()) {
					return true, nil
				}
			}
			return false, nil
		})
		negs = append(negs, o.neg)
	}
	return all(tests, negs), nil
}

func compileStatistic(m *match) (pred, error) {
	mode, prob := "", -1.0
	for _, o := range m.opts {
		switch o.name {
		case "--mode":
			mode = o.values[0]
		case "--probability":
			p, err := strconv.ParseFloat(o.values[0], 64)
			if err != nil || p < 0 || p > 1 {
				return nil, fmt.Errorf("--probability %q: want a number from 0 to 1", o.values[0])
			}
			prob = p
		}
		if o.neg {
			return nil, fmt.Errorf("\"! %s\" is not modelled", o.name)
		}
	}
	if mode != "random" || prob < 0 {
		return nil, fmt.Errorf("only --mode random --probability P is modelled")
	}
	return func(w *walker) (bool, error) { return w.choose(prob), nil }, nil
}

func compileMarkMatch(m *match) (pred, error) {
	o := m.opts[0]
	v, mask, err := parseMarkMask(o.values[0])
	if err != nil {
		return nil, fmt.Errorf("--mark: %w", err)
	}
	return all([]func(*walker) (bool, error){func(w *walker) (bool, error) {
		return w.mark&mask == v, nil
	}}, []bool{o.neg}), nil
}

func compileSet(m *match) (pred, error) {
	if len(m.opts) != 1 {
		return nil, fmt.Errorf("want one --match-set NAME FLAGS")
	}
	o := m.opts[0]
	name := o.values[0]
	flags := strings.Split(o.values[1], ",")
	for _, f := range flags {
		if f != "src" && f != "dst" {
			return nil, fmt.Errorf("--match-set %s %s: flags are src or dst", name, o.values[1])
		}
	}
	return all([]func(*walker) (bool, error){func(w *walker) (bool, error) {
		return w.f.setHas(name, flags, w)
	}}, []bool{o.neg}), nil
}

var knownStates = map[string]bool{"NEW": true, "ESTABLISHED": true, "RELATED": true,
	"INVALID": true, "UNTRACKED": true, "DNAT": true, "SNAT": true}

func compileState(m *match) (pred, error) {
	o := m.opts[0]
	states := strings.Split(o.values[0], ",")
	for _, s := range states {
		if !knownStates[s] || (m.module == "state" && (s == "DNAT" || s == "SNAT")) {
			return nil, fmt.Errorf("%s: unknown state %q", o.name, s)
		}
	}
	return all([]func(*walker) (bool, error){func(w *walker) (bool, error) {
		for _, s := range states {
			if s == w.state || (s == "DNAT" && w.natted) || (s == "SNAT" && w.masq) {
				return true, nil
			}
		}
		return false, nil
	}}, []bool{o.neg}), nil
}

// recentMatch is xt_recent: named lists of addresses with the time they were last seen.
type recentMatch struct {
	name     string
	command  string // --set, --rcheck, --update, --remove
	neg      bool
	seconds  time.Duration
	hitcount int
	reap     bool
	dest     bool
	mask     netip.Addr
}

func compileRecent(m *match) (pred, error) {
	r := recentMatch{name: "DEFAULT"}
	for _, o := range m.opts {
		switch o.name {
		case "--name":
			r.name = o.values[0]
		case "--set", "--rcheck", "--update", "--remove":
			if r.command != "" {
				return nil, fmt.Errorf("both %s and %s", r.command, o.name)
			}
			r.command, r.neg = o.name, o.neg
		case "--seconds", "--hitcount":
			n, err := strconv.Atoi(o.values[0])
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%s %q: want a positive number", o.name, o.values[0])
			}
			if o.name == "--seconds" {
				r.seconds = time.Duration(n) * time.Second
			} else {
				r.hitcount = n
			}
		case "--reap":
			r.reap = true
		case "--rdest":
			r.dest = true
		case "--mask":
			a, err := netip.ParseAddr(o.values[0])
			if err != nil {
				return nil, fmt.Errorf("--mask %q: not an address", o.values[0])
			}
			r.mask = a
		}
	}
	switch {
	case r.command == "":
		return nil, fmt.Errorf("needs one of --set, --rcheck, --update, --remove")
	case (r.seconds > 0 || r.hitcount > 0) && r.command != "--rcheck" && r.command != "--update":
		return nil, fmt.Errorf("--seconds and --hitcount need --rcheck or --update")
	case r.reap && r.seconds == 0:
		return nil, fmt.Errorf("--reap needs --seconds")
	}
	return func(w *walker) (bool, error) {
		ok, err := w.recent(r)
		return ok != r.neg, err
	}, nil
}

// maskAddr applies a recent --mask to an address.
func maskAddr(a, mask netip.Addr) netip.Addr {
	if !mask.IsValid() || mask.BitLen() != a.BitLen() {
		return a
	}
	ab, mb := a.AsSlice(), mask.AsSlice()
	for i := range ab {
		ab[i] &= mb[i]
	}
	out, _ := netip.AddrFromSlice(ab)
	return out
}
