package iptables

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
)

// canonicalize rewrites a parsed rule into the form iptables-save prints, so that the
// Fake's Dump and `iptables-save` agree, and rules compare equal the way `iptables -C`
// compares them. Values that do not parse are left alone for compileRule to report.
// Each case below was checked against iptables 1.8.9 (nf_tables), and ip6tables for fam
// IPv6.
func canonicalize(r *rule, fam Family) {
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
			canonicalRecent(m, fam)
		}
	}
	switch r.target {
	case "REJECT":
		if len(r.targetOpt) == 0 {
			r.targetOpt = []opt{{name: "--reject-with", values: []string{rejectDefault[fam]}}}
		}
	case "MARK":
		if len(r.targetOpt) == 1 {
			if v, mask, err := xmark(r.targetOpt[0]); err == nil {
				r.targetOpt = []opt{{name: "--set-xmark", values: []string{fmt.Sprintf("%#x/%#x", v, mask)}}}
			}
		}
	}
}

// rejectDefault is what REJECT sends when no --reject-with is given.
var rejectDefault = map[Family]string{IPv4: "icmp-port-unreachable", IPv6: "icmp6-port-unreachable"}

// allOnes is the family's all-ones address: recent's default --mask.
var allOnes = map[Family]string{IPv4: "255.255.255.255", IPv6: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}

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
// (--name DEFAULT, --mask 255.255.255.255 or ip6tables' all-ones mask, --rsource).
func canonicalRecent(m *match, fam Family) {
	has := func(name string) bool {
		return slices.ContainsFunc(m.opts, func(o opt) bool { return o.name == name })
	}
	if !has("--name") {
		m.opts = append(m.opts, opt{name: "--name", values: []string{"DEFAULT"}})
	}
	if !has("--mask") {
		m.opts = append(m.opts, opt{name: "--mask", values: []string{allOnes[fam]}})
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

// rejectTypes are the --reject-with values of each family's REJECT (libxt_REJECT,
// libip6t_REJECT), short aliases included.
var rejectTypes = map[Family][]string{
	IPv4: {"icmp-net-unreachable", "icmp-host-unreachable", "icmp-port-unreachable", "icmp-proto-unreachable",
		"icmp-net-prohibited", "icmp-host-prohibited", "icmp-admin-prohibited", "tcp-reset",
		"net-unreach", "host-unreach", "port-unreach", "proto-unreach", "net-prohib", "host-prohib", "admin-prohib"},
	IPv6: {"icmp6-no-route", "no-route", "icmp6-adm-prohibited", "adm-prohibited", "icmp6-addr-unreachable", "addr-unreach",
		"icmp6-port-unreachable", "port-unreach", "icmp6-policy-fail", "policy-fail", "icmp6-reject-route", "reject-route", "tcp-reset"},
}

// checkFamily refuses what the other family's binary would: an address or
// mask of the wrong family ("host/network not found" from ip6tables for
// "-d 198.18.0.10"), or an ICMP type of the other protocol.
func checkFamily(r *rule, fam Family) error {
	other := func(a netip.Addr) bool { return a.IsValid() && a.Is4() != (fam == IPv4) }
	for _, m := range []*addrMatch{r.src, r.dst} {
		if m != nil && other(m.prefix.Addr()) {
			return fmt.Errorf("%s: not an %s address (%s)", m.prefix, fam, familyTool[fam])
		}
	}
	for _, m := range r.matches {
		if m.module != "recent" {
			continue
		}
		for _, o := range m.opts {
			if a, err := netip.ParseAddr(firstValue(o)); o.name == "--mask" && (err != nil || other(a)) {
				return fmt.Errorf("recent --mask %s: not an %s mask (%s)", firstValue(o), fam, familyTool[fam])
			}
		}
	}
	for _, o := range r.targetOpt {
		switch o.name {
		case "--to-destination", "--to-source":
			if a, err := parseNATAddr(firstValue(o)); err == nil && other(a.Addr()) {
				return fmt.Errorf("%s %s %s: not an %s address (%s)", r.target, o.name, firstValue(o), fam, familyTool[fam])
			}
		case "--reject-with":
			if !slices.Contains(rejectTypes[fam], firstValue(o)) {
				return fmt.Errorf("REJECT --reject-with %s: not an ICMP type of %s", firstValue(o), familyTool[fam])
			}
		}
	}
	return nil
}

var familyTool = map[Family]string{IPv4: "iptables", IPv6: "ip6tables"}

func firstValue(o opt) string {
	if len(o.values) == 0 {
		return ""
	}
	return o.values[0]
}
