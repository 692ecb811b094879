package iptables

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// chain is one chain of a Fake table.
type chain struct {
	name    string
	builtin bool
	policy  string // built-in chains only: ACCEPT or DROP
	rules   []*loadedRule
}

// loadedRule is a rule checked against its table: its canonical text, its compiled
// matches and target.
type loadedRule struct {
	r     *rule
	text  string
	preds []pred
	tgt   target
}

// table is one table of the Fake: its chains by name.
type table struct {
	name   Table
	chains map[string]*chain
}

func newTable(name Table) *table {
	t := &table{name: name, chains: map[string]*chain{}}
	for _, c := range builtinChains[name] {
		t.chains[c] = &chain{name: c, builtin: true, policy: "ACCEPT"}
	}
	return t
}

// clone copies the table for a transaction; rules are immutable and shared.
func (t *table) clone() *table {
	c := &table{name: t.name, chains: make(map[string]*chain, len(t.chains))}
	for name, ch := range t.chains {
		cp := *ch
		cp.rules = slices.Clone(ch.rules)
		c.chains[name] = &cp
	}
	return c
}

// restore applies iptables-restore text with --noflush semantics. Each table block is
// its own transaction, as in iptables-restore: a failing block changes nothing, earlier
// blocks stay applied.
func (f *Fake) restore(data []byte) error {
	var work *table
	lineNo := 0
	for line := range strings.Lines(string(data)) {
		lineNo++
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		fail := func(err error) error {
			return fmt.Errorf("iptables-restore line %d %q: %w", lineNo, line, err)
		}
		switch {
		case line[0] == '*':
			if work != nil {
				return fail(fmt.Errorf("table %s has no COMMIT", work.name))
			}
			name := Table(line[1:])
			if _, ok := builtinChains[name]; !ok {
				return fail(fmt.Errorf("unknown table %q", name))
			}
			work = f.table(name).clone()
		case work == nil:
			return fail(fmt.Errorf("outside a *table ... COMMIT block"))
		case line == "COMMIT":
			f.tables[work.name] = work
			work = nil
		case line[0] == ':':
			if err := work.declare(line[1:]); err != nil {
				return fail(err)
			}
		default:
			words, err := splitLine(line)
			if err == nil {
				err = f.command(work, words)
			}
			if err != nil {
				return fail(err)
			}
		}
	}
	if work != nil {
		return fmt.Errorf("iptables-restore line %d: table %s: missing COMMIT", lineNo, work.name)
	}
	return nil
}

// declare handles ":NAME POLICY [packets:bytes]". A user chain is created or flushed;
// for a built-in chain only the policy is set (no flush under --noflush).
func (t *table) declare(decl string) error {
	f := strings.Fields(decl)
	if len(f) < 2 || len(f) > 3 {
		return fmt.Errorf("want \":NAME POLICY [0:0]\"")
	}
	name, policy := f[0], f[1]
	if isBuiltin(t.name, name) {
		if policy != "ACCEPT" && policy != "DROP" {
			return fmt.Errorf("built-in chain %s: policy %q, want ACCEPT or DROP", name, policy)
		}
		t.chains[name].policy = policy
		return nil
	}
	if policy != "-" {
		return fmt.Errorf("user chain %s: policy %q, want \"-\"", name, policy)
	}
	if err := checkChainName(name); err != nil {
		return err
	}
	t.chains[name] = &chain{name: name}
	return nil
}

// checkChainName applies iptables' rules for user chain names.
func checkChainName(name string) error {
	switch {
	case name == "" || len(name) > 28:
		return fmt.Errorf("chain name %q: want 1 to 28 characters", name)
	case name[0] == '-' || name[0] == '!' || strings.ContainsAny(name, " \t\"'"):
		return fmt.Errorf("chain name %q: invalid character", name)
	case isTarget(name):
		return fmt.Errorf("chain name %q: is a target name", name)
	}
	return nil
}

// command applies one -A/-I/-D/-N/-X/-F/-P line to the table.
func (f *Fake) command(t *table, w []string) error {
	switch w[0] {
	case "-A", "--append", "-I", "--insert", "-D", "--delete", "-N", "--new-chain",
		"-X", "--delete-chain", "-F", "--flush", "-P", "--policy":
	default:
		return fmt.Errorf("unknown command %q", w[0])
	}
	if len(w) < 2 && w[0] != "-F" && w[0] != "--flush" {
		return fmt.Errorf("%s needs a chain", w[0])
	}
	var c *chain
	if len(w) >= 2 {
		c = t.chains[w[1]]
		if c == nil && w[0] != "-N" && w[0] != "--new-chain" {
			return fmt.Errorf("chain %s does not exist in table %s", w[1], t.name)
		}
	}
	switch w[0] {
	case "-A", "--append":
		lr, err := f.load(t, w[2:])
		if err != nil {
			return err
		}
		c.rules = append(c.rules, lr)
	case "-I", "--insert":
		args, pos := w[2:], 1
		if len(args) > 0 {
			if n, err := strconv.Atoi(args[0]); err == nil {
				args, pos = args[1:], n
			}
		}
		if pos < 1 || pos > len(c.rules)+1 {
			return fmt.Errorf("insert position %d: chain %s has %d rules", pos, c.name, len(c.rules))
		}
		lr, err := f.load(t, args)
		if err != nil {
			return err
		}
		c.rules = slices.Insert(c.rules, pos-1, lr)
	case "-D", "--delete":
		i, err := c.find(f, t, w[2:])
		if err != nil {
			return err
		}
		c.rules = slices.Delete(c.rules, i, i+1)
	case "-N", "--new-chain":
		if c != nil {
			return fmt.Errorf("chain %s already exists", w[1])
		}
		if err := checkChainName(w[1]); err != nil {
			return err
		}
		t.chains[w[1]] = &chain{name: w[1]}
	case "-X", "--delete-chain":
		return t.deleteChain(c)
	case "-F", "--flush":
		for _, ch := range t.chains {
			if c == nil || ch == c {
				ch.rules = nil
			}
		}
	case "-P", "--policy":
		if len(w) != 3 || !c.builtin || (w[2] != "ACCEPT" && w[2] != "DROP") {
			return fmt.Errorf("want -P BUILTIN-CHAIN ACCEPT|DROP")
		}
		c.policy = w[2]
	}
	return nil
}

// find returns the index of a rule given by number ("-D CHAIN 3") or by its text.
func (c *chain) find(f *Fake, t *table, args []string) (int, error) {
	if len(args) == 1 {
		if n, err := strconv.Atoi(args[0]); err == nil {
			if n < 1 || n > len(c.rules) {
				return 0, fmt.Errorf("chain %s has no rule %d", c.name, n)
			}
			return n - 1, nil
		}
	}
	lr, err := f.load(t, args)
	if err != nil {
		return 0, err
	}
	for i, x := range c.rules {
		if x.text == lr.text {
			return i, nil
		}
	}
	return 0, fmt.Errorf("chain %s has no rule %q", c.name, lr.text)
}

func (t *table) deleteChain(c *chain) error {
	switch {
	case c.builtin:
		return fmt.Errorf("cannot delete built-in chain %s", c.name)
	case len(c.rules) > 0:
		return fmt.Errorf("chain %s is not empty", c.name)
	}
	for _, other := range t.chains {
		for _, lr := range other.rules {
			if lr.tgt.kind == tJump && lr.tgt.chain == c.name {
				return fmt.Errorf("chain %s is referenced by %s: %s", c.name, other.name, lr.text)
			}
		}
	}
	delete(t.chains, c.name)
	return nil
}

// load parses and checks one rule for table t.
func (f *Fake) load(t *table, args []string) (*loadedRule, error) {
	r, err := parseFamilyRule(args, f.family)
	if err != nil {
		return nil, err
	}
	if err := checkFamily(r, f.family); err != nil {
		return nil, err
	}
	preds, err := compileRule(r)
	if err != nil {
		return nil, err
	}
	for _, m := range r.matches {
		if m.module == "set" && len(m.opts) == 1 {
			if _, ok := f.ipsets[m.opts[0].values[0]]; !ok {
				return nil, fmt.Errorf("match set: ipset %s does not exist", m.opts[0].values[0])
			}
		}
	}
	tgt, err := compileTarget(t.name, r, func(name string) bool {
		c, ok := t.chains[name]
		return ok && !c.builtin
	})
	if err != nil {
		return nil, err
	}
	return &loadedRule{r: r, text: r.String(), preds: preds, tgt: tgt}, nil
}

// dump prints the table in iptables-save form: built-in chains, then user chains by
// name, then the rules chain by chain in that order.
func (t *table) dump(b *strings.Builder) {
	fmt.Fprintf(b, "*%s\n", t.name)
	order := t.chainOrder()
	for _, c := range order {
		policy := "-"
		if c.builtin {
			policy = c.policy
		}
		fmt.Fprintf(b, ":%s %s [0:0]\n", c.name, policy)
	}
	for _, c := range order {
		for _, lr := range c.rules {
			fmt.Fprintf(b, "-A %s %s\n", c.name, lr.text)
		}
	}
	b.WriteString("COMMIT\n")
}

func (t *table) chainOrder() []*chain {
	var out []*chain
	for _, name := range builtinChains[t.name] {
		out = append(out, t.chains[name])
	}
	var user []string
	for name, c := range t.chains {
		if !c.builtin {
			user = append(user, name)
		}
	}
	slices.Sort(user)
	for _, name := range user {
		out = append(out, t.chains[name])
	}
	return out
}
