package iptables

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/kernel/internal/tracing"
)

// Packet is what the tracer sends through the rules: the first packet of a connection
// unless State says otherwise.
type Packet struct {
	Proto    string // "tcp" (when empty), "udp" or "sctp"
	Src      netip.Addr
	SrcPort  uint16 // only rules with --sport look at it
	Dst      netip.AddrPort
	Local    bool   // generated on this host: it starts in OUTPUT, not PREROUTING
	InIface  string // the interface it arrives on (-i), when not Local
	OutIface string // the interface it leaves by (-o); the tracer does not route
	State    string // conntrack state: "" is NEW; nat chains see only NEW packets
	Mark     uint32 // the packet mark it starts with

	// Pick chooses at "-m statistic --mode random": the first Pick random choices the
	// packet meets are not taken, the next one is. In kube-proxy's layout (probabilities
	// 1/n, 1/(n-1), ..., then an unconditional rule) Pick i selects endpoint i.
	// TraceAll follows every choice instead.
	Pick int
}

// Trace is where a packet went and why.
type Trace struct {
	Packet      Packet
	Steps       []Step
	Verdict     string         // ACCEPT, DROP or REJECT
	DNAT        netip.AddrPort // the new destination after DNAT; invalid when none
	Redirect    uint16         // the local port of a REDIRECT; 0 when none
	Masquerade  bool           // MASQUERADE in POSTROUTING
	SNAT        netip.Addr     // the new source after SNAT; invalid when none
	Mark        uint32         // the packet mark at the end
	Delivered   bool           // to this host (INPUT), rather than forwarded
	Probability float64        // of this path, given the random choices on it
}

// Step is one rule that matched (or a random choice not taken, or a chain's policy).
type Step struct {
	Table Table
	Chain string
	Rule  string // in iptables-save form, without "-A CHAIN"; "" for a policy
	Note  string // what the rule did to the packet, e.g. "DNAT 198.19.0.5:8080"
}

// Result is the outcome on one line: "DNAT 198.19.0.5:8080, MASQUERADE",
// "REDIRECT :40123", "REJECT", "ACCEPT".
func (t Trace) Result() string {
	var parts []string
	switch {
	case t.Redirect != 0:
		parts = append(parts, fmt.Sprintf("REDIRECT :%d", t.Redirect))
	case t.DNAT.IsValid():
		parts = append(parts, "DNAT "+t.DNAT.String())
	}
	switch {
	case t.Masquerade:
		parts = append(parts, "MASQUERADE")
	case t.SNAT.IsValid():
		parts = append(parts, "SNAT "+t.SNAT.String())
	}
	if t.Verdict != "ACCEPT" || len(parts) == 0 {
		parts = append(parts, t.Verdict)
	}
	return strings.Join(parts, ", ")
}

// String prints the packet, the steps in aligned columns, and the result.
func (t Trace) String() string {
	var b strings.Builder
	p := t.Packet
	from := "arriving on " + p.InIface
	if p.Local {
		from = "generated locally"
	} else if p.InIface == "" {
		from = "arriving from outside"
	}
	lines := make([]tracing.Line, len(t.Steps))
	for i, s := range t.Steps {
		lines[i] = tracing.Line{Where: string(s.Table) + "/" + s.Chain, Rule: s.Rule, Note: s.Note}
	}
	tracing.Print(&b, fmt.Sprintf("%s %s -> %s, %s", p.proto(), p.Src, p.Dst, from), lines, t.Result(), t.Mark, t.Probability)
	return b.String()
}

func (p Packet) proto() string {
	if p.Proto == "" {
		return "tcp"
	}
	return p.Proto
}

// Trace sends p through the rules, like the kernel would: PREROUTING (or OUTPUT when
// Local), then INPUT when the destination is local after NAT, else FORWARD and
// POSTROUTING. Each hook runs its tables in kernel order (raw, mangle, nat, filter;
// nat last in INPUT and POSTROUTING). The recent lists it touches (--set) are kept,
// so a second trace from the same client sees its affinity. A rule the tracer
// cannot evaluate (an unmodelled match module) is an error naming the rule.
func (f *Fake) Trace(p Packet) (Trace, error) {
	if err := f.checkPacket(p); err != nil {
		return Trace{Packet: p}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.newWalker(p, tracing.Pick(p.Pick))
	tr, err := w.run()
	if err != nil {
		return tr, err
	}
	f.recent = w.lists
	return tr, nil
}

// checkPacket refuses a packet of the other family: it never meets these rules.
func (f *Fake) checkPacket(p Packet) error {
	for _, a := range []netip.Addr{p.Src, p.Dst.Addr()} {
		if a.IsValid() && a.Is4() != (f.family == IPv4) {
			return fmt.Errorf("trace: %s is not an %s address: an %s Fake never sees it", a, f.family, familyTool[f.family])
		}
	}
	return nil
}

// TraceAll follows every random choice (-m statistic) and returns one Trace per path
// with its Probability; the probabilities add up to 1. It does not change the recent
// lists. Tests of even spread read the DNAT of each Trace.
func (f *Fake) TraceAll(p Packet) ([]Trace, error) {
	if err := f.checkPacket(p); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return tracing.All(func(choose tracing.Choose) (Trace, error) { return f.newWalker(p, choose).run() })
}

// walker is one packet on its way through the rules.
type walker struct {
	f          *Fake
	pkt        Packet
	src        netip.Addr
	sport      uint16
	dst        netip.AddrPort
	proto      string
	in         string
	out        string
	state      string
	mark       uint32
	natted     bool // the destination was changed (DNAT or REDIRECT)
	masq       bool
	hook       string
	now        time.Time
	lists      map[string]map[netip.Addr]recentEntry
	decide     func(float64) bool
	choice     *choice // a random choice made while matching the current rule
	recentNote string  // what a recent match did, for the step
	tr         Trace
}

type recentEntry struct {
	last time.Time
	hits int
}

func (f *Fake) newWalker(p Packet, decide func(float64) bool) *walker {
	now := time.Now()
	if f.Now != nil {
		now = f.Now()
	}
	lists := make(map[string]map[netip.Addr]recentEntry, len(f.recent))
	for k, v := range f.recent {
		lists[k] = maps.Clone(v)
	}
	state := p.State
	if state == "" {
		state = "NEW"
	}
	return &walker{
		f: f, pkt: p, src: p.Src, sport: p.SrcPort, dst: p.Dst, proto: p.proto(),
		out: p.OutIface, state: state, mark: p.Mark, now: now, lists: lists, decide: decide,
		tr: Trace{Packet: p, Probability: 1},
	}
}

// hookTables lists, per hook, the tables in the kernel's priority order.
var hookTables = map[string][]Table{
	"PREROUTING":  {TableRaw, TableMangle, TableNAT},
	"INPUT":       {TableMangle, TableFilter, TableNAT},
	"FORWARD":     {TableMangle, TableFilter},
	"OUTPUT":      {TableRaw, TableMangle, TableNAT, TableFilter},
	"POSTROUTING": {TableMangle, TableNAT},
}

func (w *walker) run() (Trace, error) {
	var hooks []string
	if w.pkt.Local {
		hooks = []string{"OUTPUT", "POSTROUTING"}
	} else {
		w.in = w.pkt.InIface
		hooks = []string{"PREROUTING"}
	}
	for i := 0; i < len(hooks); i++ {
		h := hooks[i]
		if h == "INPUT" && w.pkt.Local {
			w.in, w.out = "lo", "" // a local packet to a local address loops back through lo
		}
		v, err := w.runHook(h)
		if err != nil || v == "DROP" || v == "REJECT" {
			w.tr.Verdict = v
			return w.finish(), err
		}
		// The routing decision after PREROUTING (and after OUTPUT's NAT for local packets).
		local := w.f.isLocal(w.dst.Addr()) || w.tr.Redirect != 0
		switch {
		case h == "PREROUTING" && local:
			hooks = append(hooks, "INPUT")
		case h == "PREROUTING":
			hooks = append(hooks, "FORWARD", "POSTROUTING")
		case h == "POSTROUTING" && w.pkt.Local && local:
			hooks = append(hooks, "INPUT")
		}
		w.tr.Delivered = local
	}
	w.tr.Verdict = "ACCEPT"
	return w.finish(), nil
}

func (w *walker) finish() Trace {
	w.tr.Mark = w.mark
	return w.tr
}

// runHook runs the hook's built-in chain in each table; it returns DROP or REJECT when
// the packet ends there.
func (w *walker) runHook(hook string) (string, error) {
	w.hook = hook
	for _, name := range hookTables[hook] {
		t := w.f.tables[name]
		if t == nil || t.chains[hook] == nil || len(t.chains[hook].rules) == 0 {
			continue
		}
		if name == TableNAT && w.state != "NEW" {
			w.step(name, hook, "", "skipped: nat sees only the first packet of a connection")
			continue
		}
		v, err := w.runChain(t, hook, 0)
		if err != nil {
			return "", err
		}
		if v == "DROP" || v == "REJECT" {
			return v, nil
		}
	}
	return "ACCEPT", nil
}

func (w *walker) step(t Table, chain, rule, note string) {
	w.tr.Steps = append(w.tr.Steps, Step{Table: t, Chain: chain, Rule: rule, Note: note})
}
