package iptables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	_ Interface     = (*Fake)(nil)
	_ CounterReader = (*Fake)(nil)
)

// Fake is an in-memory netfilter: it keeps tables, chains and rules, applies restore
// text with the transaction rules of iptables-restore --noflush, rejects what the
// kernel would reject (unknown tables, targets or options, jumps to missing chains,
// deleting a chain still in use, a block without COMMIT), and traces packets through
// its rules. It is safe for concurrent use.
type Fake struct {
	// Now is the clock of the recent match (ClientIP affinity); nil means time.Now.
	// Set it before the first Trace.
	Now func() time.Time

	family Family // of the addresses its rules may name

	mu       sync.Mutex
	tables   map[Table]*table
	ipsets   map[string][]setEntry
	local    []netip.Addr
	recent   map[string]map[netip.Addr]recentEntry
	restores int
	last     []byte
}

// NewFake returns an iptables (IPv4) Fake with no rules.
func NewFake() *Fake { return NewFakeFamily(IPv4) }

// NewFakeFamily returns a Fake of iptables (IPv4) or ip6tables (IPv6) with no
// rules: it refuses addresses, masks and ICMP types of the other family, as
// the binaries of each family do, and prints its own family's defaults.
func NewFakeFamily(fam Family) *Fake {
	if fam != IPv6 {
		fam = IPv4
	}
	return &Fake{
		family: fam,
		tables: map[Table]*table{},
		ipsets: map[string][]setEntry{},
		recent: map[string]map[netip.Addr]recentEntry{},
	}
}

// table returns the table, creating it (with its built-in chains) on first use.
func (f *Fake) table(name Table) *table {
	t := f.tables[name]
	if t == nil {
		t = newTable(name)
		f.tables[name] = t
	}
	return t
}

// Restore implements Interface.
func (f *Fake) Restore(ctx context.Context, rules []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restores++
	f.last = append([]byte(nil), rules...)
	return f.restore(rules)
}

// Restores returns how many times Restore was called and the text of the last call,
// for tests of what a sync sends (a partial sync rewrites only the chains that changed).
func (f *Fake) Restores() (n int, last []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restores, append([]byte(nil), f.last...)
}

// Save implements Interface.
func (f *Fake) Save(ctx context.Context, t Table) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, ok := builtinChains[t]; !ok {
		return nil, fmt.Errorf("save: unknown table %q", t)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	f.table(t).dump(&b)
	return []byte(b.String()), nil
}

// SaveCounters implements CounterReader. The Fake counts no packets: every
// rule and chain shows [0:0], in the form iptables-save -c prints.
func (f *Fake) SaveCounters(ctx context.Context, t Table) ([]byte, error) {
	save, err := f.Save(ctx, t)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(string(save), "\n") {
		if strings.HasPrefix(line, "-A ") {
			b.WriteString("[0:0] ")
		}
		b.WriteString(line)
	}
	return []byte(b.String()), nil
}

// Dump returns every table used so far in iptables-save form, tables in the order a
// packet meets them (raw, mangle, nat, filter), without iptables-save's date comments.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, name := range tableOrder {
		if t := f.tables[name]; t != nil {
			t.dump(&b)
		}
	}
	return b.String()
}

// EnsureRule implements Interface. Rules compare in iptables-save form, so
// "-d 198.18.0.10" equals "-d 198.18.0.10/32".
func (f *Fake) EnsureRule(ctx context.Context, pos Position, t Table, chainName string, args ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, lr, found, err := f.findRule(ctx, "ensure rule", t, chainName, args)
	if err != nil || found {
		return found, err
	}
	if pos == Prepend {
		c.rules = append([]*loadedRule{lr}, c.rules...)
	} else {
		c.rules = append(c.rules, lr)
	}
	return false, nil
}

// HasRule implements Interface. Rules compare as in EnsureRule.
func (f *Fake) HasRule(ctx context.Context, t Table, chainName string, args ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, _, found, err := f.findRule(ctx, "check rule", t, chainName, args)
	return found, err
}

// findRule loads the rule args of chainName (which must exist) and reports
// whether the chain holds it. f.mu is held.
func (f *Fake) findRule(ctx context.Context, op string, t Table, chainName string, args []string) (*chain, *loadedRule, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, false, err
	}
	if _, ok := builtinChains[t]; !ok {
		return nil, nil, false, fmt.Errorf("%s: unknown table %q", op, t)
	}
	tbl := f.table(t)
	c := tbl.chains[chainName]
	if c == nil {
		return nil, nil, false, fmt.Errorf("%s: chain %s does not exist in table %s", op, chainName, t)
	}
	lr, err := f.load(tbl, args)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%s in %s/%s: %w", op, t, chainName, err)
	}
	for _, x := range c.rules {
		if x.text == lr.text {
			return c, lr, true, nil
		}
	}
	return c, lr, false, nil
}

// DeleteRule implements Interface.
func (f *Fake) DeleteRule(ctx context.Context, t Table, chainName string, args ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tbl := f.tables[t]
	if tbl == nil || tbl.chains[chainName] == nil {
		return nil
	}
	c := tbl.chains[chainName]
	r, err := parseFamilyRule(args, f.family)
	if err != nil {
		return fmt.Errorf("delete rule in %s/%s: %w", t, chainName, err)
	}
	text := r.String()
	for i, x := range c.rules {
		if x.text == text {
			c.rules = append(c.rules[:i:i], c.rules[i+1:]...)
			return nil
		}
	}
	return nil
}

// SetLocalAddrs sets the node's own addresses (loopback is always local): they decide
// "-m addrtype --dst-type LOCAL" and whether a packet is delivered (INPUT) or
// forwarded (FORWARD). The first one is where REDIRECT sends packets from outside.
func (f *Fake) SetLocalAddrs(addrs ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.local = append([]netip.Addr(nil), addrs...)
}

func (f *Fake) isLocal(a netip.Addr) bool { return a.IsLoopback() || slices.Contains(f.local, a) }

// setEntry is one ipset member: one part per dimension, an address prefix or a
// protocol:port.
type setEntry []setPart

type setPart struct {
	prefix netip.Prefix // valid for address parts
	proto  string
	port   uint16
}

// SetIPSet creates or replaces the ipset name for "-m set --match-set". Members are
// written as ipset prints them: "198.18.0.10", "198.19.0.0/16", "198.18.0.10,tcp:80",
// "198.18.0.10,tcp:80,198.19.0.5" (hash:ip,port,ip). Rules that name a set can only
// be loaded once it exists, as with the kernel.
func (f *Fake) SetIPSet(name string, members ...string) error {
	entries := make([]setEntry, 0, len(members))
	for _, m := range members {
		var e setEntry
		for i, part := range strings.Split(m, ",") {
			p, err := parseSetPart(part, i%2 == 1)
			if err != nil {
				return fmt.Errorf("ipset %s: member %q: %w", name, m, err)
			}
			e = append(e, p)
		}
		entries = append(entries, e)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ipsets[name] = entries
	return nil
}

func parseSetPart(s string, isPort bool) (setPart, error) {
	if isPort {
		proto, port, ok := strings.Cut(s, ":")
		if !ok {
			proto, port = "tcp", s
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return setPart{}, fmt.Errorf("%q: want proto:port", s)
		}
		return setPart{proto: proto, port: uint16(n)}, nil
	}
	m, err := parseAddrMatch(s, false)
	if err != nil {
		return setPart{}, err
	}
	return setPart{prefix: m.prefix}, nil
}

// setHas reports whether the packet is in the set, each dimension taken from the
// packet's source or destination as flags say ("dst,dst" for hash:ip,port).
func (f *Fake) setHas(name string, flags []string, w *walker) (bool, error) {
	entries, ok := f.ipsets[name]
	if !ok {
		return false, fmt.Errorf("ipset %s does not exist", name)
	}
	for _, e := range entries {
		if len(e) != len(flags) {
			return false, fmt.Errorf("ipset %s has %d dimensions, the rule gives %d flags", name, len(e), len(flags))
		}
		hit := true
		for i, p := range e {
			src := flags[i] == "src"
			switch {
			case p.prefix.IsValid():
				a := w.dst.Addr()
				if src {
					a = w.src
				}
				hit = hit && p.prefix.Contains(a)
			default:
				port := w.dst.Port()
				if src {
					port = w.sport
				}
				hit = hit && p.proto == w.proto && p.port == port
			}
		}
		if hit {
			return true, nil
		}
	}
	return false, nil
}
