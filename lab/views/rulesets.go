package views

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
)

// A ruleSet is the node's rules of one kind loaded into the tracer of its
// kernel package: svcproxy's nftables table into kernel/nftables' Fake, or
// iptables' rules into kernel/iptables'. `svclab trace` walks each the same
// way (TraceReport); only reading the rules and naming a step differ.
type ruleSet interface {
	// name heads the walk: "nftables (table ip svcproxy)", "iptables".
	name() string
	// walk follows pkt through the rules, the random choices going way pick.
	walk(pkt tracePacket, pick int) (walk, error)
	// ways are every way the random choices can go.
	ways(pkt tracePacket) ([]wayResult, error)
}

// walk is what a tracer says of a packet's way, whatever its rules'
// language.
type walk struct {
	text string // the steps as the tracer prints them
	hops []TraceHop
	// result is the tracer's one-line result: "DNAT 198.19.1.10:8080".
	result    string
	dnat      netip.AddrPort
	redirect  uint16 // the REDIRECT's port, 0 for none
	verdict   string
	masq      bool
	delivered bool // to the node itself
	// final says the walk decided the packet's fate: nftables' nat chains
	// run before iptables', and only a DNAT or a verdict there ends it.
	final bool
}

// nftablesRuleSet reads svcproxy's nftables table in the node (nil when
// there is none) into a tracer that knows the node's addresses.
func (v *Views) nftablesRuleSet(ctx context.Context, local []netip.Addr) (ruleSet, error) {
	list, err := v.net.NodeOutput(ctx, "nft", "list", "table", "ip", "svcproxy")
	if err != nil {
		return nil, nil // no table: svcproxy runs no nftables path
	}
	tab, err := knft.ParseListing(list)
	if err != nil {
		return nil, err
	}
	f, err := tab.Fake()
	if err != nil {
		return nil, fmt.Errorf("load the node's nftables table into the tracer: %w", err)
	}
	f.SetLocalAddrs(local...)
	return nftRules{f: f, table: tab.Family + " " + tab.Name}, nil
}

// nftRules is svcproxy's nftables table in kernel/nftables' tracer.
type nftRules struct {
	f     *knft.Fake
	table string // "ip svcproxy"
}

func (r nftRules) name() string { return "nftables (table " + r.table + ")" }

func (r nftRules) walk(pkt tracePacket, pick int) (walk, error) {
	tr, err := r.f.Trace(pkt.nftables(pick))
	if err != nil {
		return walk{}, err
	}
	w := walk{text: tr.String(), result: tr.Result(), dnat: tr.DNAT, verdict: tr.Verdict, masq: tr.Masquerade, delivered: tr.Delivered,
		final: tr.DNAT.IsValid() || tr.Verdict != "ACCEPT"}
	if !pkt.local {
		w.text = strings.Replace(w.text, ", arriving from outside", ", arriving on "+pkt.inIface, 1)
	}
	for _, st := range tr.Steps {
		w.hops = append(w.hops, TraceHop{Tracer: "nftables", Table: r.table, Chain: st.Chain, Rule: st.Rule, Note: st.Note})
	}
	return w, nil
}

func (r nftRules) ways(pkt tracePacket) ([]wayResult, error) {
	all, err := r.f.TraceAll(pkt.nftables(0))
	var out []wayResult
	for _, t := range all {
		out = append(out, wayResult{t.Result(), t.DNAT, t.Probability})
	}
	return out, err
}

// iptablesRuleSet reads the node's iptables rules into a tracer that knows
// the node's addresses.
func (v *Views) iptablesRuleSet(ctx context.Context, local []netip.Addr) (ruleSet, error) {
	save, err := v.net.NodeOutput(ctx, "iptables-save")
	if err != nil {
		return nil, err
	}
	f := kiptables.NewFake()
	if err := f.Restore(ctx, []byte(save)); err != nil {
		return nil, fmt.Errorf("load the node's iptables rules into the tracer: %w", err)
	}
	f.SetLocalAddrs(local...)
	return iptRules{f: f}, nil
}

// iptRules is the node's iptables rules in kernel/iptables' tracer.
type iptRules struct{ f *kiptables.Fake }

func (r iptRules) name() string { return "iptables" }

func (r iptRules) walk(pkt tracePacket, pick int) (walk, error) {
	tr, err := r.f.Trace(pkt.iptables(pick))
	if err != nil {
		return walk{}, err
	}
	w := walk{text: tr.String(), result: tr.Result(), dnat: tr.DNAT, redirect: tr.Redirect, verdict: tr.Verdict,
		masq: tr.Masquerade, delivered: tr.Delivered, final: true}
	for _, st := range tr.Steps {
		w.hops = append(w.hops, TraceHop{Tracer: "iptables", Table: string(st.Table), Chain: st.Chain, Rule: st.Rule, Note: st.Note})
	}
	return w, nil
}

func (r iptRules) ways(pkt tracePacket) ([]wayResult, error) {
	all, err := r.f.TraceAll(pkt.iptables(0))
	var out []wayResult
	for _, t := range all {
		out = append(out, wayResult{t.Result(), t.DNAT, t.Probability})
	}
	return out, err
}
