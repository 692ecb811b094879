package nftables

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/kernel/internal/tracing"
)

// Packet is what the tracer sends through the table: the first packet of a connection
// unless State says otherwise.
type Packet struct {
	Proto   string // "tcp" (when empty), "udp" or "sctp"
	Src     netip.Addr
	SrcPort uint16
	Dst     netip.AddrPort
	Local   bool   // generated on this host: it starts at the output hook, not prerouting
	State   string // conntrack state: "" is new; nat chains see only new connections
	Mark    uint32 // the packet mark it starts with

	// Pick chooses at `numgen random`: the first Pick random choices the packet
	// meets are not taken, the next one is. In svcproxy's layout (each endpoint
	// rule taken with 1/n, 1/(n-1), ..., the last unconditional) Pick i selects
	// endpoint i. TraceAll follows every choice instead.
	Pick int
}

func (p Packet) proto() string { return cmp.Or(p.Proto, "tcp") }

// Trace is where a packet went and why.
type Trace struct {
	Packet      Packet
	Steps       []Step
	Verdict     string         // ACCEPT, DROP or REJECT
	DNAT        netip.AddrPort // the new destination after DNAT; invalid when none
	Masquerade  bool
	Mark        uint32 // the packet mark at the end
	Delivered   bool   // to this host (input), rather than forwarded
	Probability float64
}

// Step is one rule that sent the packet on (or a random choice not taken, or a base
// chain's policy).
type Step struct {
	Chain string
	Rule  string // "" for a policy or a skipped chain
	Note  string // what the rule did, e.g. "DNAT 198.19.0.5:8080"
}

// Result is the outcome on one line: "DNAT 198.19.0.5:8080, MASQUERADE", "REJECT",
// "ACCEPT".
func (t Trace) Result() string {
	var parts []string
	if t.DNAT.IsValid() {
		parts = append(parts, "DNAT "+t.DNAT.String())
	}
	if t.Masquerade {
		parts = append(parts, "MASQUERADE")
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
	from := "arriving from outside"
	if p.Local {
		from = "generated locally"
	}
	lines := make([]tracing.Line, len(t.Steps))
	for i, s := range t.Steps {
		lines[i] = tracing.Line{Where: s.Chain, Rule: s.Rule, Note: s.Note}
	}
	tracing.Print(&b, fmt.Sprintf("%s %s -> %s, %s", p.proto(), p.Src, p.Dst, from), lines, t.Result(), t.Mark, t.Probability)
	return b.String()
}

// Trace sends p through the table, as the kernel would: the base chains of the
// prerouting hook (output when Local) in priority order, then input when the
// destination is local after DNAT, else forward and postrouting. The dynamic sets it
// updates (ClientIP affinity) are kept, so a second trace from the same client sees
// its affinity. A rule the tracer cannot evaluate is an error naming the rule.
func (f *Fake) Trace(p Packet) (Trace, error) {
	if err := f.checkFamily(p); err != nil {
		return Trace{Packet: p}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.newWalker(p, tracing.Pick(p.Pick))
	tr, err := w.run()
	if err != nil {
		return tr, err
	}
	f.dynamic = w.dyn
	return tr, nil
}

// TraceAll follows every random choice and returns one Trace per path with its
// Probability; the probabilities add up to 1. It does not change dynamic sets.
func (f *Fake) TraceAll(p Packet) ([]Trace, error) {
	if err := f.checkFamily(p); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return tracing.All(func(choose tracing.Choose) (Trace, error) { return f.newWalker(p, choose).run() })
}

// walker is one packet on its way through the table.
type walker struct {
	f      *Fake
	t      *knftables.FakeTable
	pkt    Packet
	src    netip.Addr
	dst    netip.AddrPort
	proto  string
	state  string
	mark   uint32
	hook   knftables.BaseChainHook
	dnat   bool // the connection's DNAT is bound: later nat chains of the hook are not run
	now    time.Time
	dyn    map[string]map[netip.Addr]time.Time
	decide func(float64) bool
	tr     Trace
}

func (f *Fake) newWalker(p Packet, decide func(float64) bool) *walker {
	dyn := make(map[string]map[netip.Addr]time.Time, len(f.dynamic))
	for k, v := range f.dynamic {
		dyn[k] = maps.Clone(v)
	}
	state := strings.ToLower(cmp.Or(p.State, "new"))
	f.Fake.RLock()
	t := f.Fake.Table
	f.Fake.RUnlock()
	return &walker{
		f: f, t: t, pkt: p, src: p.Src, dst: p.Dst, proto: p.proto(), state: state, mark: p.Mark,
		now: f.now(), dyn: dyn, decide: decide, tr: Trace{Packet: p, Probability: 1},
	}
}

func (w *walker) run() (Trace, error) {
	hooks := []knftables.BaseChainHook{knftables.PreroutingHook}
	if w.pkt.Local {
		hooks = []knftables.BaseChainHook{knftables.OutputHook, knftables.PostroutingHook}
	}
	for i := 0; i < len(hooks); i++ {
		h := hooks[i]
		v, err := w.runHook(h)
		if err != nil || v != "ACCEPT" {
			w.tr.Verdict = v
			w.tr.Mark = w.mark
			return w.tr, err
		}
		// The routing decision after prerouting (for local packets: they loop
		// back through input after postrouting when the destination is ours).
		local := w.f.isLocal(w.dst.Addr())
		switch {
		case h == knftables.PreroutingHook && local:
			hooks = append(hooks, knftables.InputHook)
		case h == knftables.PreroutingHook:
			hooks = append(hooks, knftables.ForwardHook, knftables.PostroutingHook)
		case h == knftables.PostroutingHook && w.pkt.Local && local:
			hooks = append(hooks, knftables.InputHook)
		}
		w.tr.Delivered = local
	}
	w.tr.Verdict = "ACCEPT"
	w.tr.Mark = w.mark
	return w.tr, nil
}

// baseChains returns the table's base chains at hook, in priority order.
func (w *walker) baseChains(hook knftables.BaseChainHook) ([]*knftables.FakeChain, error) {
	if w.t == nil {
		return nil, nil
	}
	var out []*knftables.FakeChain
	prio := map[string]int{}
	for _, c := range w.t.Chains {
		if c.Hook == nil || *c.Hook != hook {
			continue
		}
		p, err := knftables.ParsePriority(knftables.IPv4Family, string(*c.Priority))
		if err != nil {
			return nil, fmt.Errorf("chain %s: %w", c.Name, err)
		}
		prio[c.Name] = p
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *knftables.FakeChain) int {
		return cmp.Or(cmp.Compare(prio[a.Name], prio[b.Name]), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// runHook runs the base chains of hook; it returns ACCEPT, DROP or REJECT.
func (w *walker) runHook(hook knftables.BaseChainHook) (string, error) {
	w.hook, w.dnat = hook, false
	chains, err := w.baseChains(hook)
	if err != nil {
		return "", err
	}
	for _, c := range chains {
		nat := c.Type != nil && *c.Type == knftables.NATType
		switch {
		case nat && w.state != "new":
			w.step(c.Name, "", "skipped: nat chains see only the first packet of a connection")
			continue
		case nat && w.dnat && hook != knftables.PostroutingHook:
			w.step(c.Name, "", "skipped: the connection's DNAT is already bound")
			continue
		}
		v, err := w.runChain(c.Name, 0)
		if err != nil {
			return "", err
		}
		if v == "" {
			v = "ACCEPT" // the policy of svcproxy's base chains
		}
		if v != "ACCEPT" {
			return v, nil
		}
	}
	return "ACCEPT", nil
}

func (w *walker) step(chain, rule, note string) {
	w.tr.Steps = append(w.tr.Steps, Step{Chain: chain, Rule: rule, Note: note})
}

// maxDepth bounds nested jumps; the kernel refuses loops, the tracer stops here.
const maxDepth = 16

// runChain runs the packet through one chain. It returns the verdict (ACCEPT, DROP,
// REJECT), or "" when the packet comes back to the calling chain.
func (w *walker) runChain(name string, depth int) (string, error) {
	if depth > maxDepth {
		return "", fmt.Errorf("trace: jumps nested deeper than %d at %s (a loop?)", maxDepth, name)
	}
	c := w.t.Chains[name]
	if c == nil {
		return "", fmt.Errorf("trace: chain %s does not exist", name)
	}
	for _, r := range c.Rules {
		v, err := w.rule(name, r.Rule)
		if err != nil {
			return "", fmt.Errorf("trace: %s rule %q: %w", name, r.Rule, err)
		}
		switch v.kind {
		case "":
			continue
		case "return":
			return "", nil
		case "jump":
			res, err := w.runChain(v.chain, depth+1)
			if res != "" || err != nil {
				return res, err
			}
		case "goto":
			return w.runChain(v.chain, depth+1)
		default:
			return strings.ToUpper(v.kind), nil
		}
	}
	return "", nil
}
