package iptables

import (
	"fmt"
	"net/netip"
	"strings"
)

// rule is one parsed rule: the core matches (-s -d -i -o -p), the match modules in the
// order written, and the target. Its canonical text (String) is what iptables-save
// prints, so rules compare equal the way `iptables -C` compares them.
type rule struct {
	src, dst  *addrMatch
	in, out   *ifaceMatch
	proto     *protoMatch
	matches   []*match
	target    string
	targetOpt []opt
}

// opt is one option of a match module or target: [!] --name [values...].
type opt struct {
	neg    bool
	name   string
	values []string
}

type match struct {
	module string
	opts   []opt
}

type addrMatch struct {
	neg    bool
	prefix netip.Prefix
}

type ifaceMatch struct {
	neg  bool
	name string
}

type protoMatch struct {
	neg  bool
	name string
}

// moduleOptions lists, per modelled match module, its options and how many values each
// takes. A module missing here is accepted when loading (the kernel may know it), but
// the tracer stops with an error when a packet reaches it.
var moduleOptions = map[string]map[string]int{
	"tcp":       {"--dport": 1, "--sport": 1, "--syn": 0, "--tcp-flags": 2},
	"udp":       {"--dport": 1, "--sport": 1},
	"sctp":      {"--dport": 1, "--sport": 1},
	"comment":   {"--comment": 1},
	"addrtype":  {"--dst-type": 1, "--src-type": 1},
	"statistic": {"--mode": 1, "--probability": 1},
	"mark":      {"--mark": 1},
	"set":       {"--match-set": 2},
	"conntrack": {"--ctstate": 1},
	"state":     {"--state": 1},
	"multiport": {"--dports": 1, "--sports": 1, "--ports": 1},
	"recent": {"--name": 1, "--set": 0, "--rcheck": 0, "--update": 0, "--remove": 0,
		"--seconds": 1, "--reap": 0, "--hitcount": 1, "--rsource": 0, "--rdest": 0, "--mask": 1},
}

// optionAliases maps long spellings to the names iptables-save prints.
var optionAliases = map[string]string{
	"--destination-port":  "--dport",
	"--source-port":       "--sport",
	"--destination-ports": "--dports",
	"--source-ports":      "--sports",
}

// parseRule parses the arguments of an iptables (IPv4) rule (everything after
// "-A CHAIN").
func parseRule(args []string) (*rule, error) { return parseFamilyRule(args, IPv4) }

// parseFamilyRule parses a rule of iptables (IPv4) or ip6tables (IPv6): the
// family decides the defaults iptables-save prints.
func parseFamilyRule(args []string, fam Family) (*rule, error) {
	r := &rule{}
	var cur *match
	neg := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "!" {
			if neg {
				return nil, fmt.Errorf("double \"!\"")
			}
			neg = true
			continue
		}
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("option %s needs a value", a)
			}
			i++
			return args[i], nil
		}
		var err error
		switch a {
		case "-s", "--source", "--src", "-d", "--destination", "--dst":
			var v string
			if v, err = value(); err == nil {
				var m *addrMatch
				if m, err = parseAddrMatch(v, neg); err == nil {
					if a == "-s" || a == "--source" || a == "--src" {
						r.src = m
					} else {
						r.dst = m
					}
				}
			}
		case "-i", "--in-interface", "-o", "--out-interface":
			var v string
			if v, err = value(); err == nil {
				m := &ifaceMatch{neg: neg, name: v}
				if a == "-i" || a == "--in-interface" {
					r.in = m
				} else {
					r.out = m
				}
			}
		case "-p", "--protocol":
			var v string
			if v, err = value(); err == nil {
				v = strings.ToLower(v)
				if v != "all" {
					r.proto = &protoMatch{neg: neg, name: v}
				}
			}
		case "-m", "--match":
			if neg {
				return nil, fmt.Errorf("\"!\" before -m")
			}
			var v string
			if v, err = value(); err == nil {
				cur = &match{module: v}
				r.matches = append(r.matches, cur)
			}
		case "-j", "--jump":
			if neg {
				return nil, fmt.Errorf("\"!\" before -j")
			}
			var v string
			if v, err = value(); err != nil {
				return nil, err
			}
			r.target = v
			r.targetOpt, err = parseOpts(args[i+1:], targetOptions[v], v)
			if err != nil {
				return nil, fmt.Errorf("target %s: %w", v, err)
			}
			canonicalize(r, fam)
			return r, nil
		case "-g", "--goto":
			return nil, fmt.Errorf("%s is not supported by svcproxy's iptables package", a)
		default:
			if !strings.HasPrefix(a, "--") {
				return nil, fmt.Errorf("unexpected %q", a)
			}
			name := a
			if alias, ok := optionAliases[name]; ok {
				name = alias
			}
			m := r.matchFor(cur, name)
			if m == nil {
				return nil, fmt.Errorf("option %s: no match module (-m) takes it", a)
			}
			n, known := moduleOptions[m.module][name]
			if !known {
				if _, modelled := moduleOptions[m.module]; modelled {
					return nil, fmt.Errorf("match %s: unknown option %s", m.module, a)
				}
				n = countValues(args[i+1:])
			}
			if i+n >= len(args) {
				return nil, fmt.Errorf("match %s: option %s needs %d value(s)", m.module, a, n)
			}
			m.opts = append(m.opts, opt{neg: neg, name: name, values: args[i+1 : i+1+n]})
			i += n
		}
		if err != nil {
			return nil, err
		}
		neg = false
	}
	if neg {
		return nil, fmt.Errorf("\"!\" at the end of the rule")
	}
	canonicalize(r, fam)
	return r, nil
}

// matchFor finds the module an option belongs to: the current -m module when it knows
// the option, else the protocol's own match (-p tcp --dport 80 loads "-m tcp" implicitly,
// as iptables does).
func (r *rule) matchFor(cur *match, name string) *match {
	if cur != nil {
		if _, ok := moduleOptions[cur.module][name]; ok {
			return cur
		}
		if _, modelled := moduleOptions[cur.module]; !modelled {
			return cur
		}
	}
	if r.proto == nil || r.proto.neg {
		return cur // nil, or cur to report its unknown option
	}
	if _, ok := moduleOptions[r.proto.name][name]; !ok {
		return cur
	}
	for _, m := range r.matches {
		if m.module == r.proto.name {
			return m
		}
	}
	m := &match{module: r.proto.name}
	r.matches = append(r.matches, m)
	return m
}

// parseOpts parses target options. spec nil means an unmodelled target or a chain.
func parseOpts(args []string, spec map[string]int, owner string) ([]opt, error) {
	var opts []opt
	neg := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "!" {
			neg = true
			continue
		}
		if !strings.HasPrefix(a, "--") {
			return nil, fmt.Errorf("unexpected %q", a)
		}
		n, ok := spec[a]
		if !ok {
			if spec != nil || isTarget(owner) {
				return nil, fmt.Errorf("unknown option %s", a)
			}
			n = countValues(args[i+1:])
		}
		if i+n >= len(args) {
			return nil, fmt.Errorf("option %s needs %d value(s)", a, n)
		}
		opts = append(opts, opt{neg: neg, name: a, values: args[i+1 : i+1+n]})
		i += n
		neg = false
	}
	return opts, nil
}

func countValues(args []string) int {
	n := 0
	for n < len(args) && args[n] != "!" && !strings.HasPrefix(args[n], "-") {
		n++
	}
	return n
}

func parseAddrMatch(v string, neg bool) (*addrMatch, error) {
	p, err := netip.ParsePrefix(v)
	if err != nil {
		a, aerr := netip.ParseAddr(v)
		if aerr != nil {
			return nil, fmt.Errorf("%q: not an address or prefix", v)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return &addrMatch{neg: neg, prefix: p.Masked()}, nil
}

// String is the rule in iptables-save form, without "-A CHAIN".
func (r *rule) String() string {
	var b strings.Builder
	w := func(neg bool, flag string, values ...string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if neg {
			b.WriteString("! ")
		}
		b.WriteString(flag)
		for _, v := range values {
			b.WriteByte(' ')
			b.WriteString(quote(v))
		}
	}
	if r.src != nil {
		w(r.src.neg, "-s", r.src.prefix.String())
	}
	if r.dst != nil {
		w(r.dst.neg, "-d", r.dst.prefix.String())
	}
	if r.in != nil {
		w(r.in.neg, "-i", r.in.name)
	}
	if r.out != nil {
		w(r.out.neg, "-o", r.out.name)
	}
	if r.proto != nil {
		w(r.proto.neg, "-p", r.proto.name)
	}
	for _, m := range r.matches {
		w(false, "-m", m.module)
		for _, o := range m.opts {
			w(o.neg, o.name, o.values...)
		}
	}
	if r.target != "" {
		w(false, "-j", r.target)
		for _, o := range r.targetOpt {
			w(o.neg, o.name, o.values...)
		}
	}
	return b.String()
}

// quote quotes a value the way iptables-save does when it holds spaces or quotes.
func quote(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\"'\\") {
		return v
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// splitLine splits an iptables-restore line into words; double quotes group words and
// a backslash escapes the next character inside them.
func splitLine(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, inQuote := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case inQuote && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			inQuote = !inQuote
			inWord = true
		case !inQuote && (c == ' ' || c == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
