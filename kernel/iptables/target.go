package iptables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// targetOptions lists the modelled targets and their options (value counts).
var targetOptions = map[string]map[string]int{
	"ACCEPT":     {},
	"DROP":       {},
	"RETURN":     {},
	"REJECT":     {"--reject-with": 1},
	"DNAT":       {"--to-destination": 1, "--random": 0, "--persistent": 0},
	"SNAT":       {"--to-source": 1, "--random": 0, "--random-fully": 0, "--persistent": 0},
	"REDIRECT":   {"--to-ports": 1, "--random": 0},
	"MASQUERADE": {"--to-ports": 1, "--random": 0, "--random-fully": 0},
	"MARK":       {"--set-xmark": 1, "--set-mark": 1, "--or-mark": 1, "--and-mark": 1, "--xor-mark": 1},
	"LOG":        {"--log-prefix": 1, "--log-level": 1},
}

// targetTable names the one table a target is valid in (the kernel refuses it elsewhere).
var targetTable = map[string]Table{
	"DNAT": TableNAT, "SNAT": TableNAT, "REDIRECT": TableNAT, "MASQUERADE": TableNAT,
	"REJECT": TableFilter,
}

func isTarget(name string) bool {
	_, ok := targetOptions[name]
	return ok
}

type targetKind int

const (
	tNone targetKind = iota // no -j: the rule only counts
	tAccept
	tDrop
	tReject
	tReturn
	tJump
	tDNAT
	tSNAT
	tRedirect
	tMasquerade
	tMark
	tLog
)

// target is a compiled -j.
type target struct {
	kind  targetKind
	chain string         // tJump
	to    netip.AddrPort // tDNAT, tSNAT (port 0: keep the packet's port)
	port  uint16         // tRedirect
	mark  func(uint32) uint32
}

// compileTarget checks a rule's target against the table it goes to. hasChain says
// whether a user chain of that name exists in the table now.
func compileTarget(table Table, r *rule, hasChain func(string) bool) (target, error) {
	name := r.target
	if name == "" {
		return target{kind: tNone}, nil
	}
	if !isTarget(name) {
		if isBuiltin(table, name) {
			return target{}, fmt.Errorf("cannot jump to built-in chain %s", name)
		}
		if !hasChain(name) {
			return target{}, fmt.Errorf("target %q is neither a known target nor a chain of table %s", name, table)
		}
		return target{kind: tJump, chain: name}, nil
	}
	if t, ok := targetTable[name]; ok && t != table {
		return target{}, fmt.Errorf("target %s is only valid in table %s, not %s", name, t, table)
	}
	val := func(o string) string {
		for _, x := range r.targetOpt {
			if x.name == o && len(x.values) > 0 {
				return x.values[0]
			}
		}
		return ""
	}
	if needsPorts(r) && (r.proto == nil || r.proto.neg || (r.proto.name != "tcp" && r.proto.name != "udp" && r.proto.name != "sctp")) {
		return target{}, fmt.Errorf("%s with a port needs -p tcp, udp or sctp", name)
	}
	switch name {
	case "ACCEPT":
		return target{kind: tAccept}, nil
	case "DROP":
		return target{kind: tDrop}, nil
	case "REJECT":
		return target{kind: tReject}, nil
	case "RETURN":
		return target{kind: tReturn}, nil
	case "LOG":
		return target{kind: tLog}, nil
	case "MASQUERADE":
		return target{kind: tMasquerade}, nil
	case "DNAT", "SNAT":
		o := "--to-destination"
		kind := tDNAT
		if name == "SNAT" {
			o, kind = "--to-source", tSNAT
		}
		to, err := parseNATAddr(val(o))
		if err != nil {
			return target{}, fmt.Errorf("%s %s: %w", name, o, err)
		}
		return target{kind: kind, to: to}, nil
	case "REDIRECT":
		v := val("--to-ports")
		if v == "" {
			return target{}, fmt.Errorf("REDIRECT without --to-ports is not modelled")
		}
		p, err := strconv.ParseUint(v, 10, 16)
		if err != nil || p == 0 {
			return target{}, fmt.Errorf("REDIRECT --to-ports %q: want one port number", v)
		}
		return target{kind: tRedirect, port: uint16(p)}, nil
	case "MARK":
		return compileMark(r.targetOpt)
	}
	return target{}, fmt.Errorf("target %s is not modelled", name)
}

// parseNATAddr parses "ip", "ip:port" or "[ipv6]:port". Ranges are not modelled.
func parseNATAddr(v string) (netip.AddrPort, error) {
	if v == "" {
		return netip.AddrPort{}, fmt.Errorf("missing")
	}
	if ap, err := netip.ParseAddrPort(v); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: want ip or ip:port", v)
	}
	return netip.AddrPortFrom(a, 0), nil
}

// compileMark compiles MARK; canonicalize has turned every form into --set-xmark.
func compileMark(opts []opt) (target, error) {
	if len(opts) != 1 {
		return target{}, fmt.Errorf("MARK needs exactly one of --set-xmark, --set-mark, --or-mark, --and-mark, --xor-mark")
	}
	v, m, err := xmark(opts[0])
	if err != nil {
		return target{}, fmt.Errorf("MARK %s: %w", opts[0].name, err)
	}
	return target{kind: tMark, mark: func(x uint32) uint32 { return (x &^ m) ^ v }}, nil
}

// parseMarkMask parses "value[/mask]"; the mask defaults to all ones.
func parseMarkMask(s string) (value, mask uint32, err error) {
	vs, ms, hasMask := strings.Cut(s, "/")
	v, err := strconv.ParseUint(vs, 0, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("%q: not a mark", s)
	}
	mask = 0xffffffff
	if hasMask {
		m, err := strconv.ParseUint(ms, 0, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("%q: not a mask", s)
		}
		mask = uint32(m)
	}
	return uint32(v), mask, nil
}

// needsPorts says whether the target rewrites a port, which iptables only allows
// for a rule with a port protocol.
func needsPorts(r *rule) bool {
	for _, o := range r.targetOpt {
		switch {
		case o.name == "--to-ports":
			return true
		case (o.name == "--to-destination" || o.name == "--to-source") && len(o.values) == 1:
			if ap, err := netip.ParseAddrPort(o.values[0]); err == nil && ap.Port() != 0 {
				return true
			}
		}
	}
	return false
}
