package lab

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"regexp"
	"sort"
	"strings"

	"github.com/svcproxy/svcproxy/service"
)

// RulesOptions narrow and annotate `svclab rules`.
type RulesOptions struct {
	// Service shows only the rules of one Service: "web" (namespace
	// default) or "kube-system/kube-dns". "" shows all of svcproxy's rules.
	Service string
	// Counters shows the kernel's counters: packets per iptables rule
	// (`iptables-save -c`), connections and packets per IPVS virtual and
	// real server (`ipvsadm -ln --stats`).
	Counters bool
}

// RulesWith writes svcproxy's rules as the node's kernel holds them, like
// Rules, narrowed to one Service and with counters when opts say so. Each
// hashed iptables chain (SVCP-SVC-..., SVCP-SEP-...) is named in a legend by
// its service port and endpoint. It returns what it wrote.
func (l *Lab) RulesWith(ctx context.Context, opts RulesOptions) (string, error) {
	var svc *service.Service
	if opts.Service != "" {
		snap, err := l.Snapshot(ctx)
		if err != nil {
			return "", err
		}
		if svc, err = FindService(snap, opts.Service); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	if svc != nil {
		fmt.Fprintf(&b, "# %s\n\n", describeService(svc))
	}
	saveArgs := []string{"iptables-save"}
	if opts.Counters {
		saveArgs = append(saveArgs, "-c")
	}
	save, err := l.net.NodeOutput(ctx, saveArgs...)
	if err != nil {
		return "", err
	}
	rs := parseSave(save)
	legend := rs.legend()
	keep := func(r saveLine) bool { return strings.Contains(r.text, "SVCP-") }
	if svc != nil {
		keep = rs.serviceFilter(svc.NamespacedName, legend)
	}
	b.WriteString(rs.format(keep, legend, l.net.WithName, opts.Counters))
	// IPv6: svcproxy's other dataplane, in ip6tables, shown when it serves
	// something: any Service, or the one asked for has an IPv6 address.
	if svc == nil || hasIPv6(svc) {
		saveArgs[0] = "ip6tables-save"
		if save6, err := l.net.NodeOutput(ctx, saveArgs...); err == nil && strings.Contains(save6, "SVCP-") {
			rs6 := parseSave(save6)
			legend6 := rs6.legend()
			keep6 := func(r saveLine) bool { return strings.Contains(r.text, "SVCP-") }
			if svc != nil {
				keep6 = rs6.serviceFilter(svc.NamespacedName, legend6)
			}
			b.WriteString("\n# IPv6: ip6tables (" + strings.Join(saveArgs, " ") + ")\n\n")
			b.WriteString(rs6.format(keep6, legend6, l.net.WithName, opts.Counters))
		}
	}

	if mode, _ := l.Mode(); mode == "socklb" {
		d, err := l.socketLBDump(ctx)
		if err != nil {
			return "", err
		}
		if svc != nil {
			d = onlyService(d, svc)
		}
		b.WriteString(l.formatSocketLB(d, l.hostCookies()))
	}

	nft, err := l.net.NodeOutput(ctx, "nft", "list", "table", "ip", "svcproxy")
	switch {
	case err == nil && svc != nil:
		b.WriteString("\n# nftables (nft list table ip svcproxy), the lines of " + svc.NamespacedName.String() + "\n")
		tab, perr := parseNFTList(nft)
		if perr != nil {
			return "", perr
		}
		b.WriteString(tab.formatService(svc.NamespacedName))
	case err == nil:
		b.WriteString("\n# nftables (nft list table ip svcproxy)\n")
		b.WriteString(nft)
	default:
		if _, lookErr := exec.LookPath("nft"); lookErr != nil {
			b.WriteString("\n# nftables: not shown, nft is not installed (Debian: apt-get install nftables).\n")
		} else {
			b.WriteString("\n# nftables: no table ip svcproxy (svcproxy runs no nftables path).\n")
		}
	}
	if nft6, err := l.net.NodeOutput(ctx, "nft", "list", "table", "ip6", "svcproxy"); err == nil {
		switch {
		case svc != nil && hasIPv6(svc):
			b.WriteString("\n# IPv6: nftables (nft list table ip6 svcproxy), the lines of " + svc.NamespacedName.String() + "\n")
			tab, perr := parseNFTList(nft6)
			if perr != nil {
				return "", perr
			}
			b.WriteString(tab.formatService(svc.NamespacedName))
		case svc == nil:
			b.WriteString("\n# IPv6: nftables (nft list table ip6 svcproxy)\n")
			b.WriteString(nft6)
		}
	}

	ipvsArgs := []string{"ipvsadm", "-ln"}
	if opts.Counters {
		ipvsArgs = append(ipvsArgs, "--stats")
	}
	ipvs, err := l.net.NodeOutput(ctx, ipvsArgs...)
	switch {
	case err == nil:
		fmt.Fprintf(&b, "\n# IPVS (%s)\n", strings.Join(ipvsArgs, " "))
		if svc != nil {
			addrs, aerr := l.nodeAddrs(ctx)
			if aerr != nil {
				return "", aerr
			}
			ipvs = filterIPVS(ipvs, serviceVIPs(svc, addrs))
		}
		b.WriteString(ipvs)
	default:
		if _, lookErr := exec.LookPath("ipvsadm"); lookErr != nil {
			b.WriteString("\n# IPVS: not shown, ipvsadm is not installed (Debian: apt-get install ipvsadm).\n")
		} else {
			msg := strings.TrimSpace(strings.SplitN(err.Error(), "\n", 2)[0])
			if i := strings.LastIndex(msg, ": "); i >= 0 {
				msg = msg[i+2:]
			}
			fmt.Fprintf(&b, "\n# IPVS: none. This kernel has no IPVS, so --mode ipvs cannot run here.\n# (ipvsadm -ln: %s)\n", msg)
		}
	}
	_, err = io.WriteString(l.cfg.Stdout, b.String())
	return b.String(), err
}

// saveLine is one line of iptables-save output.
type saveLine struct {
	table   string // "nat"
	text    string // the line without its counters
	packets string // "[12:720]" -> "12"; "" without -c
	chain   string // -A CHAIN, or the declared chain of ":CHAIN"
	target  string // -j TARGET
	comment string // --comment "..."
	rule    bool   // an -A line
}

type saveRules struct {
	tables []string // in order
	lines  []saveLine
}

var (
	countersRE = regexp.MustCompile(`^\[(\d+):(\d+)\] `)
	commentRE  = regexp.MustCompile(`--comment (?:"([^"]*)"|(\S+))`)
	targetRE   = regexp.MustCompile(` -j (\S+)`)
	hashedRE   = regexp.MustCompile(`^SVCP-(SVC|SEP|EXT|SVL|FW|XLB)-[A-Z0-9]{16}$`)
	dnatRE     = regexp.MustCompile(`--to-destination (\S+)`)
)

func parseSave(save string) *saveRules {
	rs := &saveRules{}
	table := ""
	for _, raw := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(raw, "*"):
			table = strings.TrimPrefix(raw, "*")
			rs.tables = append(rs.tables, table)
			continue
		case raw == "" || strings.HasPrefix(raw, "#") || raw == "COMMIT":
			continue
		}
		l := saveLine{table: table, text: raw}
		if m := countersRE.FindStringSubmatch(raw); m != nil {
			l.packets, l.text = m[1], raw[len(m[0]):]
		}
		switch {
		case strings.HasPrefix(l.text, ":"):
			l.chain = strings.Fields(strings.TrimPrefix(l.text, ":"))[0]
		case strings.HasPrefix(l.text, "-A "):
			l.rule = true
			l.chain = strings.Fields(l.text)[1]
			if m := targetRE.FindStringSubmatch(l.text); m != nil {
				l.target = m[1]
			}
			if m := commentRE.FindStringSubmatch(l.text); m != nil {
				l.comment = m[1] + m[2]
			}
		}
		rs.lines = append(rs.lines, l)
	}
	return rs
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
func (rs *saveRules) legend() map[string]string {
	names := map[string]string{}
	for _, l := range rs.lines {
		if l.rule && hashedRE.MatchString(l.target) && l.comment != "" && names[l.target] == "" {
			names[l.target] = strings.TrimSuffix(l.comment, " cluster IP")
		}
	}
	for _, l := range rs.lines {
		if l.rule && hashedRE.MatchString(l.chain) && l.comment != "" && names[l.chain] == "" {
			names[l.chain] = l.comment
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
	for _, l := range rs.lines {
		if l.rule && strings.HasPrefix(l.chain, "SVCP-SEP-") && !strings.Contains(names[l.chain], " -> ") {
			if m := dnatRE.FindStringSubmatch(l.text); m != nil {
				names[l.chain] += " -> " + m[1]
			}
		}
	}
	return names
}

// serviceFilter keeps the lines of one Service: rules whose comment names one
// of its ports, the declarations and rules of its hashed chains, the jumps to
// them, and the hooks from the built-in chains that lead there.
func (rs *saveRules) serviceFilter(svc service.NamespacedName, legend map[string]string) func(saveLine) bool {
	prefix := svc.String() + ":"
	mine := map[string]bool{}
	for chain, name := range legend {
		if strings.HasPrefix(name, prefix) {
			mine[chain] = true
		}
	}
	return func(l saveLine) bool {
		switch {
		case mine[l.chain] || mine[l.target]:
			return true
		case strings.HasPrefix(l.comment, prefix):
			return true
		case l.rule && isBuiltinChain(l.chain) && strings.HasPrefix(l.target, "SVCP-"):
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
func (rs *saveRules) format(keep func(saveLine) bool, legend map[string]string, withName func(netip.Addr) string, counters bool) string {
	var b strings.Builder
	used := map[string]bool{}
	for _, l := range rs.lines {
		if keep(l) {
			for _, c := range []string{l.chain, l.target} {
				if legend[c] != "" {
					used[c] = true
				}
			}
		}
	}
	if len(used) > 0 {
		var chains []string
		width := 0
		for c := range used {
			chains = append(chains, c)
			width = max(width, len(c))
		}
		sort.Slice(chains, func(i, j int) bool { return chainOrder(chains[i], legend) < chainOrder(chains[j], legend) })
		b.WriteString("# The hashed chains, by service port and endpoint:\n")
		for _, c := range chains {
			fmt.Fprintf(&b, "#   %-*s  %s\n", width, c, nameEndpoint(legend[c], withName))
		}
		b.WriteString("\n")
	}
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
	for _, table := range rs.tables {
		var lines []saveLine
		for _, l := range rs.lines {
			if l.table == table && keep(l) {
				lines = append(lines, l)
			}
		}
		sort.SliceStable(lines, func(i, j int) bool {
			if lines[i].rule != lines[j].rule {
				return !lines[i].rule
			}
			return lines[i].rule && rank(lines[i].chain) < rank(lines[j].chain)
		})
		header := false
		for _, l := range lines {
			if !header {
				if printed > 0 {
					b.WriteString("\n")
				}
				b.WriteString("# table " + table + "\n")
				header = true
			}
			switch {
			case counters && l.rule:
				fmt.Fprintf(&b, "%7s  %s\n", l.packets, l.text)
			case counters:
				fmt.Fprintf(&b, "%7s  %s\n", "", l.text)
			default:
				b.WriteString(l.text + "\n")
			}
			printed++
		}
	}
	if printed == 0 {
		return "# no SVCP- rules\n"
	}
	return b.String()
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

// formatService writes the parts of the table a packet for svc meets: the
// verdict-map elements of svc, the base nat chains and the dispatch chain
// (services), and svc's own chains.
func (t *nftTable) formatService(svc service.NamespacedName) string {
	prefix := svc.String() + ":"
	infix := "-" + svc.String() + "/"
	var b strings.Builder
	fmt.Fprintf(&b, "table %s %s {\n", t.Family, t.Name)
	for _, m := range t.Maps {
		var elems []string
		for _, e := range m.Elements {
			if strings.HasPrefix(e.Comment, prefix) || strings.Contains(e.Value, infix) {
				el := strings.Join(e.Key, " . ")
				if e.Comment != "" {
					el += fmt.Sprintf(" comment %q", e.Comment)
				}
				elems = append(elems, el+" : "+e.Value)
			}
		}
		if len(elems) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\tmap %s {\n\t\ttype %s\n\t\telements = { %s }\n\t}\n\n", m.Name, m.Type,
			strings.Join(elems, ",\n\t\t\t     "))
	}
	for _, c := range t.Chains {
		if !(c.Type == "nat" || c.Name == "services" || strings.Contains(c.Name, infix)) {
			continue
		}
		fmt.Fprintf(&b, "\tchain %s {\n", c.Name)
		if c.Hook != "" {
			fmt.Fprintf(&b, "\t\ttype %s hook %s priority %s;\n", c.Type, c.Hook, c.Priority)
		}
		for _, r := range c.Rules {
			b.WriteString("\t\t" + r + "\n")
		}
		b.WriteString("\t}\n\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// serviceVIPs are the addresses and ports where svc's traffic arrives:
// ClusterIP:port, external IPs, and NodePorts on each node address.
// hasIPv6 says whether svc has an IPv6 address that svcproxy serves: a
// ClusterIP, an external IP or a load balancer IP.
func hasIPv6(svc *service.Service) bool {
	for _, ip := range append(append(append([]netip.Addr{}, svc.ClusterIPs...), svc.ExternalIPs...), svc.LoadBalancerIPs...) {
		if ip.Is6() && !ip.Is4In6() {
			return true
		}
	}
	return false
}

func serviceVIPs(svc *service.Service, nodeAddrs []netip.Addr) []string {
	var out []string
	for _, p := range svc.Ports {
		for _, ip := range append(append(append([]netip.Addr{}, svc.ClusterIPs...), svc.ExternalIPs...), svc.LoadBalancerIPs...) {
			out = append(out, strings.ToUpper(string(p.Protocol))+"  "+netip.AddrPortFrom(ip, p.Port).String()+" ")
		}
		if p.NodePort != 0 {
			for _, a := range nodeAddrs {
				out = append(out, strings.ToUpper(string(p.Protocol))+"  "+netip.AddrPortFrom(a, p.NodePort).String()+" ")
			}
		}
	}
	return out
}

// filterIPVS keeps the header of `ipvsadm -ln` and the virtual servers whose
// line starts with one of vips ("TCP  198.18.0.20:80 "), with their real
// servers.
func filterIPVS(out string, vips []string) string {
	var b strings.Builder
	keep := false
	for i, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		switch {
		case i < 3 || strings.HasPrefix(line, "  ->") && keep:
		case strings.HasPrefix(line, "  ->"):
			continue
		default:
			keep = false
			for _, v := range vips {
				if strings.HasPrefix(line, v) {
					keep = true
				}
			}
			if !keep {
				continue
			}
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
