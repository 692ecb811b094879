package views

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"

	"github.com/svcproxy/svcproxy/service"
)

// The iptables part of `svclab rules`: iptables-save's lines, read back by
// kernel/iptables (ParseSave), with each hashed chain named in a legend by
// its service port and endpoint, narrowed to one Service, in the order a
// packet meets them.

// hashedRE is a service port's chain: kube-proxy's layout, SVCP- for KUBE-.
var hashedRE = regexp.MustCompile(`^SVCP-(SVC|SEP|EXT|SVL|FW|XLB)-[A-Z0-9]{16}$`)

// formatSave writes iptables-save output as `svclab rules` shows it: the
// SVCP- lines (svc's only, when svc is not nil) with a legend, and with
// counters a column of packets.
func (v *Views) formatSave(save string, svc *service.Service, counters bool) (string, error) {
	s, err := kiptables.ParseSave(save)
	if err != nil {
		return "", err
	}
	names := legend(s)
	keep := func(l kiptables.SavedLine) bool { return strings.Contains(l.Text, "SVCP-") }
	if svc != nil {
		keep = serviceFilter(svc.NamespacedName, names)
	}
	return format(s, keep, names, v.net.WithName, counters), nil
}

// chainKinds says what a service port's hashed chain is for, after the
// port's name in the legend (kube-proxy's iptables chain layout).
var chainKinds = map[string]string{
	"SVC": "",
	"SVL": " (endpoints on this node: traffic policy Local)",
	"EXT": " (traffic from outside: NodePort, external IPs)",
	"FW":  " (load balancer IPs)",
	"XLB": " (external traffic, policy Local)",
}

// legend names each hashed chain by the comment of the rule that jumps to it
// ("default/web:http cluster IP", "default/web:http -> 198.19.1.10:8080"), or
// else by its own rules' comment.
func legend(s *kiptables.Saved) map[string]string {
	names := map[string]string{}
	for _, l := range s.Lines {
		comment := l.Option("--comment")
		if l.Rule && hashedRE.MatchString(l.Target()) && comment != "" && names[l.Target()] == "" {
			names[l.Target()] = strings.TrimSuffix(comment, " cluster IP")
		}
	}
	for _, l := range s.Lines {
		comment := l.Option("--comment")
		if l.Rule && hashedRE.MatchString(l.Chain) && comment != "" && names[l.Chain] == "" {
			names[l.Chain] = comment
		}
	}
	// A service port's chains are named by the port, whatever comment led
	// there ("pod traffic for default/web:http external destinations", an
	// endpoint's comment on the SVL chain's first rule), and what they are for.
	for chain, name := range names {
		kind := strings.Split(chain, "-")[1]
		if kind == "SEP" {
			continue
		}
		for _, f := range strings.Fields(name) {
			if strings.Contains(f, "/") && strings.Contains(f, ":") {
				names[chain] = f + chainKinds[kind]
				break
			}
		}
	}
	// An endpoint chain without a jump comment is named by its DNAT.
	for _, l := range s.Lines {
		if l.Rule && strings.HasPrefix(l.Chain, "SVCP-SEP-") && !strings.Contains(names[l.Chain], " -> ") {
			if ep := l.Option("--to-destination"); ep != "" {
				names[l.Chain] += " -> " + ep
			}
		}
	}
	return names
}

// serviceFilter keeps the lines of one Service: rules whose comment names one
// of its ports, the declarations and rules of its hashed chains, the jumps to
// them, and the hooks from the built-in chains that lead there.
func serviceFilter(svc service.NamespacedName, legend map[string]string) func(kiptables.SavedLine) bool {
	prefix := svc.String() + ":"
	mine := map[string]bool{}
	for chain, name := range legend {
		if strings.HasPrefix(name, prefix) {
			mine[chain] = true
		}
	}
	return func(l kiptables.SavedLine) bool {
		switch {
		case mine[l.Chain] || mine[l.Target()]:
			return true
		case strings.HasPrefix(l.Option("--comment"), prefix):
			return true
		case l.Rule && isBuiltinChain(l.Chain) && strings.HasPrefix(l.Target(), "SVCP-"):
			return true
		}
		return false
	}
}

func isBuiltinChain(c string) bool {
	switch c {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return true
	}
	return false
}

// format writes the kept lines under "# table NAME" headings: first the
// legend of the hashed chains they name, then, with counters, each rule's
// packet count in a column of its own.
func format(s *kiptables.Saved, keep func(kiptables.SavedLine) bool, legend map[string]string, withName func(netip.Addr) string, counters bool) string {
	var b strings.Builder
	writeLegend(&b, s, keep, legend, withName)
	if counters {
		b.WriteString("# The first column counts packets. nat rules see only the first packet of a\n# connection (conntrack replays their decision for the rest): there, packets\n# are new connections.\n\n")
	}
	// A packet's order: the built-in chains, the shared SVCP- chains, then each
	// service port's chains in legend order (SVC, then its SEPs). Declarations
	// stay first, as iptables-save writes them; each chain keeps its rules' order.
	rank := func(chain string) string {
		switch {
		case isBuiltinChain(chain):
			return "0"
		case legend[chain] == "":
			return "1"
		}
		return "2 " + chainOrder(chain, legend)
	}
	printed := 0
	for _, table := range s.Tables {
		var lines []kiptables.SavedLine
		for _, l := range s.Lines {
			if l.Table == table && keep(l) {
				lines = append(lines, l)
			}
		}
		sort.SliceStable(lines, func(i, j int) bool {
			if lines[i].Rule != lines[j].Rule {
				return !lines[i].Rule
			}
			return lines[i].Rule && rank(lines[i].Chain) < rank(lines[j].Chain)
		})
		header := false
		for _, l := range lines {
			if !header {
				if printed > 0 {
					b.WriteString("\n")
				}
				b.WriteString("# table " + string(table) + "\n")
				header = true
			}
			switch {
			case counters && l.Rule && l.Counted:
				fmt.Fprintf(&b, "%7d  %s\n", l.Packets, l.Text)
			case counters:
				fmt.Fprintf(&b, "%7s  %s\n", "", l.Text)
			default:
				b.WriteString(l.Text + "\n")
			}
			printed++
		}
	}
	if printed == 0 {
		return "# no SVCP- rules\n"
	}
	return b.String()
}

// writeLegend writes the legend of the hashed chains the kept lines name.
func writeLegend(b *strings.Builder, s *kiptables.Saved, keep func(kiptables.SavedLine) bool, legend map[string]string, withName func(netip.Addr) string) {
	used := map[string]bool{}
	for _, l := range s.Lines {
		if keep(l) {
			for _, c := range []string{l.Chain, l.Target()} {
				if legend[c] != "" {
					used[c] = true
				}
			}
		}
	}
	if len(used) == 0 {
		return
	}
	var chains []string
	width := 0
	for c := range used {
		chains = append(chains, c)
		width = max(width, len(c))
	}
	sort.Slice(chains, func(i, j int) bool { return chainOrder(chains[i], legend) < chainOrder(chains[j], legend) })
	b.WriteString("# The hashed chains, by service port and endpoint:\n")
	for _, c := range chains {
		fmt.Fprintf(b, "#   %-*s  %s\n", width, c, nameEndpoint(legend[c], withName))
	}
	b.WriteString("\n")
}

// chainOrder sorts the legend by what it names, services before their
// endpoints.
func chainOrder(chain string, legend map[string]string) string {
	kind := map[string]string{"SVC": "1", "SVL": "2", "EXT": "3", "FW": "4", "XLB": "5", "SEP": "6"}
	k := strings.SplitN(chain, "-", 3)[1]
	name, _, _ := strings.Cut(legend[chain], " -> ")
	return name + " " + kind[k] + " " + legend[chain]
}

// nameEndpoint adds the lab host's name to an endpoint address in a legend
// entry: "default/web:http -> 198.19.1.10:8080 (web-0)".
func nameEndpoint(s string, withName func(netip.Addr) string) string {
	head, ep, ok := strings.Cut(s, " -> ")
	if !ok {
		return s
	}
	ap, err := netip.ParseAddrPort(ep)
	if err != nil {
		return s
	}
	named := withName(ap.Addr())
	if named == ap.Addr().String() {
		return s
	}
	return head + " -> " + ap.String() + strings.TrimPrefix(named, ap.Addr().String())
}
