package iptables

import (
	"fmt"
	"net/netip"
	"strings"
)

// maxDepth bounds nested jumps; the kernel refuses loops, the Fake stops at this depth.
const maxDepth = 32

// runChain runs the packet through one chain. It returns the verdict ("ACCEPT", "DROP",
// "REJECT"), or "" when the packet comes back to the calling chain.
func (w *walker) runChain(t *table, name string, depth int) (string, error) {
	if depth > maxDepth {
		return "", fmt.Errorf("trace: jumps nested deeper than %d at %s/%s (a loop?)", maxDepth, t.name, name)
	}
	c := t.chains[name]
	for _, lr := range c.rules {
		w.choice, w.recentNote = nil, ""
		ok, err := w.matches(lr)
		if err != nil {
			return "", fmt.Errorf("trace: %s/%s rule %q: %w", t.name, name, lr.text, err)
		}
		if !ok {
			if w.choice != nil && !w.choice.taken {
				w.step(t.name, name, lr.text, fmt.Sprintf("random: not taken (p=%.4g)", 1-w.choice.p))
			}
			continue
		}
		note, err := w.apply(lr)
		if err != nil {
			return "", fmt.Errorf("trace: %s/%s rule %q: %w", t.name, name, lr.text, err)
		}
		w.step(t.name, name, lr.text, note)
		switch lr.tgt.kind {
		case tAccept, tDNAT, tSNAT, tRedirect, tMasquerade:
			return "ACCEPT", nil
		case tDrop:
			return "DROP", nil
		case tReject:
			return "REJECT", nil
		case tReturn:
			if !c.builtin {
				return "", nil
			}
			w.step(t.name, name, "", "policy "+c.policy)
			return c.policy, nil
		case tJump:
			v, err := w.runChain(t, lr.tgt.chain, depth+1)
			if v != "" || err != nil {
				return v, err
			}
		}
	}
	if c.builtin {
		w.step(t.name, name, "", "policy "+c.policy)
		return c.policy, nil
	}
	return "", nil
}

// matches evaluates the core matches, then each module in order (as the kernel does:
// a random choice is only made when the matches before it hold).
func (w *walker) matches(lr *loadedRule) (bool, error) {
	r := lr.r
	if !addrOK(r.src, w.src) || !addrOK(r.dst, w.dst.Addr()) ||
		!ifaceOK(r.in, w.in) || !ifaceOK(r.out, w.out) {
		return false, nil
	}
	if r.proto != nil && (r.proto.name == w.proto) == r.proto.neg {
		return false, nil
	}
	for i, m := range r.matches {
		p := lr.preds[i]
		if p == nil {
			return false, fmt.Errorf("match module %q is not modelled by the Fake's tracer", m.module)
		}
		ok, err := p(w)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func addrOK(m *addrMatch, a netip.Addr) bool {
	return m == nil || m.prefix.Contains(a) != m.neg
}

// ifaceOK matches -i/-o; a trailing "+" matches any interface with that prefix.
func ifaceOK(m *ifaceMatch, iface string) bool {
	if m == nil {
		return true
	}
	ok := iface == m.name
	if prefix, wild := strings.CutSuffix(m.name, "+"); wild {
		ok = iface != "" && strings.HasPrefix(iface, prefix)
	}
	return ok != m.neg
}

// choose makes a random choice (-m statistic) and records it for the trace.
func (w *walker) choose(p float64) bool {
	taken := w.decide(p)
	if taken {
		w.tr.Probability *= p
	} else {
		w.tr.Probability *= 1 - p
	}
	w.choice = &choice{p: p, taken: taken}
	return taken
}

// apply does what the rule's target does to the packet and says so.
func (w *walker) apply(lr *loadedRule) (string, error) {
	tgt := lr.tgt
	var note string
	if w.choice != nil {
		note = fmt.Sprintf("random: taken (p=%.4g)", w.choice.p)
	}
	add := func(s string) {
		if note != "" {
			note += "; "
		}
		note += s
	}
	switch tgt.kind {
	case tDNAT, tRedirect:
		if w.hook != "PREROUTING" && w.hook != "OUTPUT" {
			return "", fmt.Errorf("%s is only valid from PREROUTING and OUTPUT, reached from %s", lr.r.target, w.hook)
		}
		w.natted = true
		if tgt.kind == tRedirect {
			w.tr.Redirect = tgt.port
			w.dst = netip.AddrPortFrom(w.redirectAddr(), tgt.port)
			add(fmt.Sprintf("REDIRECT :%d", tgt.port))
			break
		}
		port := tgt.to.Port()
		if port == 0 {
			port = w.dst.Port()
		}
		w.dst = netip.AddrPortFrom(tgt.to.Addr(), port)
		w.tr.DNAT = w.dst
		add("DNAT " + w.dst.String())
	case tMasquerade, tSNAT:
		if w.hook != "POSTROUTING" && !(tgt.kind == tSNAT && w.hook == "INPUT") {
			return "", fmt.Errorf("%s is only valid from POSTROUTING, reached from %s", lr.r.target, w.hook)
		}
		w.masq = true
		if tgt.kind == tSNAT {
			w.src = tgt.to.Addr()
			w.tr.SNAT = w.src
			add("SNAT " + w.src.String())
		} else {
			w.tr.Masquerade = true
			add("MASQUERADE")
		}
	case tMark:
		w.mark = tgt.mark(w.mark)
		add(fmt.Sprintf("mark %#x", w.mark))
	case tAccept, tDrop, tReject:
		add(lr.r.target)
	case tReturn:
		add("RETURN")
	}
	if w.recentNote != "" {
		add(w.recentNote)
	}
	return note, nil
}

// redirectAddr is where REDIRECT sends a packet: 127.0.0.1 for a local one, else the
// node's first address (the kernel uses the incoming interface's primary address).
func (w *walker) redirectAddr() netip.Addr {
	if w.pkt.Local {
		if w.dst.Addr().Is6() {
			return netip.IPv6Loopback()
		}
		return netip.MustParseAddr("127.0.0.1")
	}
	if len(w.f.local) > 0 {
		return w.f.local[0]
	}
	return w.dst.Addr()
}

// recent is xt_recent on the walker's copy of the lists.
func (w *walker) recent(r recentMatch) (bool, error) {
	a := w.src
	if r.dest {
		a = w.dst.Addr()
	}
	a = maskAddr(a, r.mask)
	list := w.lists[r.name]
	if list == nil {
		list = map[netip.Addr]recentEntry{}
		w.lists[r.name] = list
	}
	e, seen := list[a]
	fresh := func(e recentEntry) bool { return r.seconds == 0 || w.now.Sub(e.last) <= r.seconds }
	switch r.command {
	case "--set":
		list[a] = recentEntry{last: w.now, hits: e.hits + 1}
		w.recentNote = fmt.Sprintf("recent %s: set %s", r.name, a)
		return true, nil
	case "--remove":
		delete(list, a)
		return seen, nil
	}
	if r.reap {
		for k, x := range list {
			if !fresh(x) {
				delete(list, k)
			}
		}
	}
	ok := seen && fresh(e) && (r.hitcount == 0 || e.hits >= r.hitcount)
	if ok && r.command == "--update" {
		list[a] = recentEntry{last: w.now, hits: e.hits + 1}
	}
	if ok {
		w.recentNote = fmt.Sprintf("recent %s: %s seen %s ago", r.name, a, w.now.Sub(e.last))
	}
	return ok, nil
}

// choice is a random choice made while matching the current rule.
type choice struct {
	p     float64
	taken bool
}
