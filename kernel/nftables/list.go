package nftables

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/knftables"
)

// Listing is a table as `nft list table` prints it, read back into objects:
// the live rules a tracer walks (Fake) and a reader filters (the lab's
// `svclab trace` and `svclab rules SERVICE`).
type Listing struct {
	Family, Name string
	Sets, Maps   []*ListedSet // in the order listed
	Counters     []string
	// Packets are each named counter's packets, by name.
	Packets map[string]uint64
	Chains  []*ListedChain
}

// ListedSet is a set or a map.
type ListedSet struct {
	Name     string
	Type     string // "ipv4_addr", "ipv4_addr . inet_proto . inet_service : verdict"
	Flags    []string
	Timeout  time.Duration
	Elements []ListedElement
}

// ListedElement is one element: its key, and for a map its value.
type ListedElement struct {
	Key     []string // "198.18.0.20", "tcp", "80"
	Value   string   // "goto service-..."; "" in a set
	Comment string
}

// ListedChain is a chain and its rules, as printed.
type ListedChain struct {
	Name string
	// Type, Hook and Priority are a base chain's ("nat", "prerouting",
	// "dstnat - 1"); empty for a regular chain.
	Type, Hook, Priority string
	Rules                []string
}

// ParseListing reads the output of `nft list table FAMILY NAME`. It knows the
// statements svcproxy's table uses and nft's way of printing them; what it
// does not know (a flowtable, say) is an error naming the line.
//
// Why the text and not knftables, which lists names (List), elements
// (ListElements) and counters (ListCounters): a tracer walks the rules'
// text, and knftables' ListRules fills in only their comments and handles;
// nor does it list a chain's hook and priority, or a set's type and flags.
// `nft --json` gives each rule as an expression tree, which would have to be
// printed back into the text nft prints anyway.
func ParseListing(text string) (*Listing, error) {
	p := &listParser{lines: strings.Split(text, "\n")}
	return p.table()
}

type listParser struct {
	lines []string
	i     int // the next line
}

func (p *listParser) next() (string, bool) {
	for p.i < len(p.lines) {
		line := strings.TrimSpace(p.lines[p.i])
		p.i++
		if line != "" {
			return line, true
		}
	}
	return "", false
}

func (p *listParser) errorf(format string, args ...any) error {
	return fmt.Errorf("nft list, line %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *listParser) table() (*Listing, error) {
	line, ok := p.next()
	f := strings.Fields(line)
	if !ok || len(f) != 4 || f[0] != "table" || f[3] != "{" {
		return nil, p.errorf("want \"table FAMILY NAME {\", got %q", line)
	}
	t := &Listing{Family: f[1], Name: f[2]}
	for {
		line, ok := p.next()
		if !ok {
			return nil, p.errorf("the table is not closed")
		}
		f := strings.Fields(line)
		switch {
		case line == "}":
			return t, nil
		case f[0] == "comment":
		case (f[0] == "set" || f[0] == "map") && len(f) == 3 && f[2] == "{":
			s, err := p.set(f[1])
			if err != nil {
				return nil, err
			}
			if f[0] == "set" {
				t.Sets = append(t.Sets, s)
			} else {
				t.Maps = append(t.Maps, s)
			}
		case f[0] == "counter" && len(f) == 3 && f[2] == "{":
			t.Counters = append(t.Counters, f[1])
			n, err := p.counterBlock()
			if err != nil {
				return nil, err
			}
			if t.Packets == nil {
				t.Packets = map[string]uint64{}
			}
			t.Packets[f[1]] = n
		case f[0] == "chain" && len(f) == 3 && f[2] == "{":
			c, err := p.chain(f[1])
			if err != nil {
				return nil, err
			}
			t.Chains = append(t.Chains, c)
		default:
			return nil, p.errorf("%q is not modelled", line)
		}
	}
}

// counterBlock reads a named counter's block, "packets N bytes M", and
// returns its packets.
func (p *listParser) counterBlock() (uint64, error) {
	var n uint64
	for {
		line, ok := p.next()
		if !ok {
			return 0, p.errorf("a block is not closed")
		}
		if line == "}" {
			return n, nil
		}
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "packets" {
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0, p.errorf("counter: %q: %v", line, err)
			}
			n = v
		}
	}
}

func (p *listParser) set(name string) (*ListedSet, error) {
	s := &ListedSet{Name: name}
	for {
		line, ok := p.next()
		if !ok {
			return nil, p.errorf("set %s is not closed", name)
		}
		key, rest, _ := strings.Cut(line, " ")
		switch key {
		case "}":
			return s, nil
		case "type", "typeof":
			s.Type = rest
		case "flags":
			s.Flags = strings.Split(strings.ReplaceAll(rest, " ", ""), ",")
		case "timeout":
			d, err := parseDuration(rest)
			if err != nil {
				return nil, p.errorf("set %s: %v", name, err)
			}
			s.Timeout = d
		case "size", "comment", "policy", "gc-interval", "auto-merge":
		case "elements":
			body, err := p.braces(strings.TrimPrefix(rest, "= "))
			if err != nil {
				return nil, err
			}
			for _, e := range splitTop(body) {
				el, err := parseElement(e)
				if err != nil {
					return nil, p.errorf("set %s: %v", name, err)
				}
				s.Elements = append(s.Elements, el)
			}
		default:
			return nil, p.errorf("set %s: %q is not modelled", name, line)
		}
	}
}

// braces returns what is inside "{ ... }", which starts in first and may go
// on over the next lines.
func (p *listParser) braces(first string) (string, error) {
	text := first
	for depth(text) > 0 {
		line, ok := p.next()
		if !ok {
			return "", p.errorf("{ is not closed")
		}
		text += " " + line
	}
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, "{") || !strings.HasSuffix(text, "}") {
		return "", p.errorf("want { ... }, got %q", text)
	}
	return strings.TrimSpace(text[1 : len(text)-1]), nil
}

// depth is the number of braces s opens and does not close, outside quotes.
func depth(s string) int {
	d, quoted := 0, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case quoted:
		case r == '{':
			d++
		case r == '}':
			d--
		}
	}
	return d
}

// splitTop splits at the commas outside quotes and braces.
func splitTop(s string) []string {
	var out []string
	d, quoted, start := 0, false, 0
	for i, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case quoted:
		case r == '{':
			d++
		case r == '}':
			d--
		case r == ',' && d == 0:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if last := strings.TrimSpace(s[start:]); last != "" {
		out = append(out, last)
	}
	return out
}

// parseElement reads `198.18.0.20 . tcp . 80 comment "x" : goto chain`,
// or a set's `198.19.1.2 timeout 10m expires 9m58s`.
func parseElement(s string) (ListedElement, error) {
	var e ListedElement
	keyPart, value, isMap := strings.Cut(s, " : ")
	if isMap {
		e.Value = strings.TrimSpace(value)
	}
	if i := strings.Index(keyPart, ` comment "`); i >= 0 {
		e.Comment = strings.Trim(strings.TrimSpace(keyPart[i+len(" comment "):]), `"`)
		keyPart = keyPart[:i]
	}
	// A dynamic set's element carries its timer: the key ends there.
	for _, w := range []string{" timeout ", " expires "} {
		if i := strings.Index(keyPart, w); i >= 0 {
			keyPart = keyPart[:i]
		}
	}
	for _, k := range strings.Split(keyPart, " . ") {
		if k = strings.TrimSpace(k); k == "" {
			return e, fmt.Errorf("element %q: empty key", s)
		}
		e.Key = append(e.Key, k)
	}
	return e, nil
}

func (p *listParser) chain(name string) (*ListedChain, error) {
	c := &ListedChain{Name: name}
	for {
		line, ok := p.next()
		if !ok {
			return nil, p.errorf("chain %s is not closed", name)
		}
		switch {
		case line == "}":
			return c, nil
		case strings.HasPrefix(line, "comment "):
		case strings.HasPrefix(line, "type "):
			// type nat hook prerouting priority dstnat - 1; policy accept;
			spec, _, _ := strings.Cut(line, ";")
			f := strings.Fields(spec)
			if len(f) < 6 || f[2] != "hook" || f[4] != "priority" {
				return nil, p.errorf("chain %s: %q is not modelled", name, line)
			}
			c.Type, c.Hook, c.Priority = f[1], f[3], strings.Join(f[5:], " ")
		default:
			rule := line
			if i := strings.Index(rule, " # handle "); i >= 0 {
				rule = rule[:i]
			}
			c.Rules = append(c.Rules, rule)
		}
	}
}

// parseDuration reads nft's durations: "10m", "3h", "1d2h", "10800s", "500ms".
func parseDuration(s string) (time.Duration, error) {
	units := []struct {
		suffix string
		d      time.Duration
	}{{"ms", time.Millisecond}, {"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}}
	var total time.Duration
	rest := strings.TrimSpace(s)
	if rest == "" {
		return 0, fmt.Errorf("duration %q", s)
	}
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		n, err := strconv.Atoi(rest[:i])
		if err != nil {
			return 0, fmt.Errorf("duration %q", s)
		}
		rest = rest[i:]
		found := false
		for _, u := range units {
			if strings.HasPrefix(rest, u.suffix) {
				total += time.Duration(n) * u.d
				rest = rest[len(u.suffix):]
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("duration %q", s)
		}
	}
	return total, nil
}

// priority turns nft's printed priority ("dstnat - 1", "srcnat", "-110") into
// the form knftables parses ("dstnat-1").
func (c *ListedChain) priority() string { return strings.ReplaceAll(c.Priority, " ", "") }

// Fake is a Fake holding the listed table, for the tracer. A dynamic set's
// elements (the clients ClientIP affinity has pinned, until their timeout)
// become elements of the Fake's set, so the trace sees the affinity the
// kernel has.
func (t *Listing) Fake() (*Fake, error) {
	f := NewFakeFamily(knftables.Family(t.Family), t.Name)
	tx := f.NewTransaction()
	tx.Add(&knftables.Table{})
	for _, s := range t.Sets {
		set := &knftables.Set{Name: s.Name, Type: s.Type}
		for _, fl := range s.Flags {
			set.Flags = append(set.Flags, knftables.SetFlag(fl))
		}
		if s.Timeout > 0 {
			set.Timeout = &s.Timeout
		}
		tx.Add(set)
	}
	for _, m := range t.Maps {
		tx.Add(&knftables.Map{Name: m.Name, Type: m.Type})
	}
	for _, name := range t.Counters {
		tx.Add(&knftables.Counter{Name: name})
	}
	for _, c := range t.Chains {
		ch := &knftables.Chain{Name: c.Name}
		if c.Hook != "" {
			typ, hook, prio := knftables.BaseChainType(c.Type), knftables.BaseChainHook(c.Hook), knftables.BaseChainPriority(c.priority())
			ch.Type, ch.Hook, ch.Priority = &typ, &hook, &prio
		}
		tx.Add(ch)
	}
	for _, c := range t.Chains {
		for _, r := range c.Rules {
			tx.Add(&knftables.Rule{Chain: c.Name, Rule: r})
		}
	}
	for _, s := range t.Sets {
		for _, e := range s.Elements {
			tx.Add(&knftables.Element{Set: s.Name, Key: e.Key})
		}
	}
	for _, m := range t.Maps {
		for _, e := range m.Elements {
			tx.Add(&knftables.Element{Map: m.Name, Key: e.Key, Value: []string{e.Value}})
		}
	}
	if err := f.Run(context.Background(), tx); err != nil {
		return nil, err
	}
	return f, nil
}
