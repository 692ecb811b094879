package iptables

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// Render returns the iptables-restore text (for --noflush) of every chain and rule
// the Snapshot needs: the text a full sync applies. It is a pure function.
// Hooks from the built-in chains (nat PREROUTING -j SVCP-SERVICES, ...) are not in
// it: they are ensured one by one, see Dataplane.
func Render(cfg Config, snap *service.Snapshot) ([]byte, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rs := render(cfg, snap, nil)
	return rs.text(rs.fullPlan(nil)), nil
}

// Shared chains that service ports add lines to.
const (
	natServices = iota
	natNodePorts
	filterServices
	filterExternal
	numShared
)

var sharedChains = [numShared]struct{ table, chain string }{
	natServices:    {tableNAT, chainServices},
	natNodePorts:   {tableNAT, chainNodePorts},
	filterServices: {tableFilter, chainServices},
	filterExternal: {tableFilter, chainExternalServices},
}

// portRules is what one service port contributes to the rule set.
type portRules struct {
	port   *service.Port // what it was rendered from
	zone   string        // and this node's zone then: topology hints depend on it
	name   service.PortName
	shared [numShared][]byte // lines for the shared chains
	// In a large cluster (Config.largeCluster, which large records) its
	// ClusterIP jumps go to the block chains of the ClusterIPs instead of
	// SVCP-SERVICES: one cipRule each.
	cips   []cipRule
	large  bool
	chains []string // its own nat chains, in declaration order
	text   []byte   // the "-A" lines of its own chains
	status PortStatus
	flows  kernelsync.Flows // for conntrack cleanup
}

// cipRule is a port's ClusterIP jump in a large cluster: the line, in the
// chain of the ClusterIP's block.
type cipRule struct {
	block netip.Prefix
	chain string
	line  []byte
}

// lines builds restore text a line at a time.
type lines struct{ b []byte }

// rule starts a rule: "-A chain".
func (l *lines) rule(chain string) *lines {
	l.b = append(l.b, "-A "...)
	l.b = append(l.b, chain...)
	return l
}

// comment adds the comment match, quoted.
func (l *lines) comment(s string) *lines {
	l.b = append(l.b, ` -m comment --comment "`...)
	l.b = append(l.b, s...)
	l.b = append(l.b, '"')
	return l
}

// w adds words, each after a space.
func (l *lines) w(words ...string) *lines {
	for _, w := range words {
		l.b = append(l.b, ' ')
		l.b = append(l.b, w...)
	}
	return l
}

// end ends the line.
func (l *lines) end() { l.b = append(l.b, '\n') }

// add writes a whole line of words.
func (l *lines) add(words ...string) {
	for i, w := range words {
		if i > 0 {
			l.b = append(l.b, ' ')
		}
		l.b = append(l.b, w...)
	}
	l.b = append(l.b, '\n')
}

func comment(s string) []string { return []string{"-m", "comment", "--comment", `"` + s + `"`} }

// probability is kube-proxy's computeProbability: the i-th of n endpoint rules
// matches with 1/(n-i), which gives each endpoint 1/n of new connections.
func probability(n int) string { return fmt.Sprintf("%0.10f", 1.0/float64(n)) }

// allOnes is the recent match's --mask: every bit of a client address counts
// (the default of each family's binary, written out as kube-proxy writes it).
func allOnes(f service.Family) string {
	if f == service.IPv6 {
		return "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	}
	return "255.255.255.255"
}

// affinitySeconds is the recent match's --seconds for a ClientIP Service.
func affinitySeconds(a service.Affinity) string {
	t := a.Timeout
	if t <= 0 {
		t = service.DefaultAffinityTimeout
	}
	return strconv.Itoa(int(t / time.Second))
}

// ruleset is a rendered Snapshot: the shared chains' fixed lines and every port.
type ruleset struct {
	cfg   Config
	fixed map[string]map[string][]byte // table -> top chain -> lines not from ports
	ports []*portRules

	// Against the previous rendering (when there was one): the ports rendered
	// anew (with what they replace, nil for a new port) and the ports gone. A
	// port reused as it was is in neither.
	changed []change
	removed []*portRules
}

// change is a port rendered anew: Old is its previous rendering, or nil.
type change = kernelsync.Change[*portRules]

// render renders snap: the path's rules, every port as
// kernelsync.RenderPorts reuses or renders it (renderPort), and the fixed
// lines of the top chains. A port that renders the same, in the same zone of
// this node (topology hints), as the one a rendering in prev was made from
// reuses that rendering: a sync after one change renders one port, not
// 10,000.
func render(cfg Config, snap *service.Snapshot, prev map[service.PortName]*portRules) *ruleset {
	prev = otherMode(prev, cfg.largeCluster)
	ports := kernelsync.RenderPorts(snap, prev, cfg.Carries, func(p *service.Port) *portRules { return renderPort(&cfg, p, snap.Node()) })
	return &ruleset{cfg: cfg, fixed: renderFixed(&cfg), ports: ports.All, changed: ports.Changed, removed: ports.Removed}
}

// otherMode returns prev with every rendering made in the other mode (a
// cluster that became large, or small) marked as rendered from nothing, so
// that RenderPorts renders its port anew, keeping it as the port's Old (and
// still finding the ports that left): its ClusterIP jump is in the other
// place. prev itself when every rendering is of mode large.
func otherMode(prev map[service.PortName]*portRules, large bool) map[service.PortName]*portRules {
	mixed := false
	for _, pr := range prev {
		if pr.large != large {
			mixed = true
			break
		}
	}
	if !mixed {
		return prev
	}
	out := make(map[service.PortName]*portRules, len(prev))
	for name, pr := range prev {
		if pr.large != large {
			stale := *pr
			stale.port = &service.Port{} // renders the same as no port
			pr = &stale
		}
		out[name] = pr
	}
	return out
}

// rendered is what rs rendered, as the Ledger records it.
func (rs *ruleset) rendered() kernelsync.Ports[*portRules] {
	return kernelsync.Ports[*portRules]{All: rs.ports, Changed: rs.changed, Removed: rs.removed}
}

// Name, RenderedFrom and Flows implement kernelsync.Port.
func (pr *portRules) Name() service.PortName                { return pr.name }
func (pr *portRules) RenderedFrom() (*service.Port, string) { return pr.port, pr.zone }
func (pr *portRules) Flows() *kernelsync.Flows              { return &pr.flows }

// renderFixed renders the lines of the top chains that do not come from ports.
// SVCP-SERVICES' NodePort jump is rendered last by ruleset.top.
func renderFixed(cfg *Config) map[string]map[string][]byte {
	mark := cfg.mark()
	var masq, post, fwd, nodePorts lines
	masq.add("-A", chainMarkMasq, "-j", "MARK", "--or-mark", mark)
	post.add("-A", chainPostrouting, "-m", "mark", "!", "--mark", mark+"/"+mark, "-j", "RETURN")
	// Clear the mark so a packet re-entering the stack (e.g. after an IPsec
	// transform) is not masqueraded twice, as kube-proxy does.
	post.add("-A", chainPostrouting, "-j", "MARK", "--xor-mark", mark)
	post.add(slices.Concat([]string{"-A", chainPostrouting}, comment("svcproxy service traffic requiring SNAT"),
		[]string{"-j", "MASQUERADE", "--random-fully"})...)
	fwd.add(slices.Concat([]string{"-A", chainForward}, comment("svcproxy forwarding rules"),
		[]string{"-m", "mark", "--mark", mark + "/" + mark, "-j", "ACCEPT"})...)
	fwd.add(slices.Concat([]string{"-A", chainForward}, comment("svcproxy forwarding conntrack rule"),
		[]string{"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"})...)
	// The jump to SVCP-NODEPORTS must be the last rule of SVCP-SERVICES: a
	// ClusterIP or externalIP match must win over "any local address".
	nodeIPs := cfg.KernelNodePortIPs()
	c := comment("svcproxy service nodeports; NOTE: this must be the last rule in this chain")
	if len(nodeIPs) == 0 {
		// No NodePorts on 127.0.0.0/8 (or ::1): a DNATed packet from loopback could only
		// leave the node with route_localnet=1, which svcproxy never sets
		// (CVE-2020-8558). kube-proxy's iptables mode does set it by default
		// and serves localhost NodePorts (--iptables-localhost-nodeports);
		// its nftables and IPVS modes do not. See docs/operations.md.
		nodePorts.add(slices.Concat([]string{"-A", chainServices}, c,
			[]string{"-m", "addrtype", "--dst-type", "LOCAL", "!", "-d", cfg.Family.Loopback().String(), "-j", chainNodePorts})...)
	}
	for _, ip := range nodeIPs {
		nodePorts.add(slices.Concat([]string{"-A", chainServices}, c, []string{"-d", ip.String(), "-j", chainNodePorts})...)
	}
	return map[string]map[string][]byte{
		tableFilter: {chainForward: fwd.b},
		tableNAT: {
			chainMarkMasq:    masq.b,
			chainPostrouting: post.b,
			chainServices:    nodePorts.b, // appended after the ports' lines
		},
	}
}
