package iptables

import (
	"fmt"
	"slices"
	"strconv"
)

// canonicalize rewrites a parsed rule into the form iptables-save prints, so that the
// Fake's Dump and `iptables-save` agree, and rules compare equal the way `iptables -C`
// compares them. Values that do not parse are left alone for compileRule to report.
// Each case below was checked against iptables 1.8.9 (nf_tables).
func canonicalize(r *rule) {
	for _, m := range r.matches {
		switch m.module {
		case "mark":
			for i, o := range m.opts {
				if v, mask, err := parseMarkMask(o.values[0]); err == nil {
					m.opts[i].values = []string{fmtMark(v, mask)}
				}
			}
		case "statistic":
			for i, o := range m.opts {
				if p, err := strconv.ParseFloat(o.values[0], 64); err == nil && o.name == "--probability" {
					m.opts[i].values = []string{fmt.Sprintf("%.11f", p)}
				}
			}
		case "tcp":
			for i, o := range m.opts {
				if o.name == "--syn" {
					m.opts[i] = opt{neg: o.neg, name: "--tcp-flags", values: []string{"FIN,SYN,RST,ACK", "SYN"}}
				}
			}
		case "recent":
			canonicalRecent(m)
		}
	}
	switch r.target {
	case "REJECT":
		if len(r.targetOpt) == 0 {
			r.targetOpt = []opt{{name: "--reject-with", values: []string{"icmp-port-unreachable"}}}
		}
	case "MARK":
		if len(r.targetOpt) == 1 {
			if v, mask, err := xmark(r.targetOpt[0]); err == nil {
				r.targetOpt = []opt{{name: "--set-xmark", values: []string{fmt.Sprintf("%#x/%#x", v, mask)}}}
			}
		}
	}
}

// fmtMark prints a mark match value as iptables-save does: the mask only when not all ones.
func fmtMark(v, mask uint32) string {
	if mask == 0xffffffff {
		return fmt.Sprintf("%#x", v)
	}
	return fmt.Sprintf("%#x/%#x", v, mask)
}

// recentOrder is the order libxt_recent prints its options in.
var recentOrder = []string{"--rcheck", "--set", "--update", "--remove", "--seconds", "--reap",
	"--hitcount", "--name", "--mask", "--rsource", "--rdest"}

// canonicalRecent orders the options and adds the defaults iptables-save prints
// (--name DEFAULT, --mask 255.255.255.255, --rsource).
func canonicalRecent(m *match) {
	has := func(name string) bool {
		return slices.ContainsFunc(m.opts, func(o opt) bool { return o.name == name })
	}
	if !has("--name") {
		m.opts = append(m.opts, opt{name: "--name", values: []string{"DEFAULT"}})
	}
	if !has("--mask") {
		m.opts = append(m.opts, opt{name: "--mask", values: []string{"255.255.255.255"}})
	}
	if !has("--rsource") && !has("--rdest") {
		m.opts = append(m.opts, opt{name: "--rsource"})
	}
	slices.SortStableFunc(m.opts, func(a, b opt) int {
		return slices.Index(recentOrder, a.name) - slices.Index(recentOrder, b.name)
	})
}

// xmark turns any MARK option into the (value, mask) of --set-xmark, whose meaning is
// mark = (mark &^ mask) ^ value (libxt_MARK).
func xmark(o opt) (value, mask uint32, err error) {
	v, m, err := parseMarkMask(o.values[0])
	if err != nil {
		return 0, 0, err
	}
	_, hasMask := cutMask(o.values[0])
	if hasMask && o.name != "--set-xmark" && o.name != "--set-mark" {
		return 0, 0, fmt.Errorf("%q: %s takes no mask", o.values[0], o.name)
	}
	switch o.name {
	case "--set-xmark":
		return v, m, nil
	case "--set-mark":
		return v, m | v, nil
	case "--or-mark":
		return v, v, nil
	case "--xor-mark":
		return v, 0, nil
	case "--and-mark":
		return 0, ^v, nil
	}
	return 0, 0, fmt.Errorf("unknown option %s", o.name)
}

func cutMask(s string) (string, bool) {
	for i := range len(s) {
		if s[i] == '/' {
			return s[:i], true
		}
	}
	return s, false
}
