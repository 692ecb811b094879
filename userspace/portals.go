package userspace

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// The chains of the userspace mode. Each is hooked from built-in chains by one
// rule (hooks); their content is rewritten as a whole by every sync.
const (
	// ChainPortalsContainer REDIRECTs packets arriving from other hosts (pods,
	// other nodes) for a ClusterIP or external IP to the port's listener. It is
	// hooked from nat PREROUTING.
	ChainPortalsContainer = "SVCP-PORTALS-CONTAINER"
	// ChainPortalsHost does the same for packets the node itself sends, hooked
	// from nat OUTPUT. REDIRECT there rewrites the destination to 127.0.0.1
	// (::1 in ip6tables), which a listener bound to 0.0.0.0 (::) accepts.
	ChainPortalsHost = "SVCP-PORTALS-HOST"
	// ChainReject REJECTs packets for the virtual addresses of a port without
	// endpoints, so clients fail at once instead of timing out. It is hooked from
	// filter INPUT, FORWARD and OUTPUT: a ClusterIP is not a local address, so
	// packets for it are forwarded (from other hosts) or sent (from the node).
	ChainReject = "SVCP-REJECT"
	// ChainNodePortsReject REJECTs packets for the node port of a port without
	// endpoints. It is hooked from filter INPUT only, where every packet is
	// addressed to the node, including the node's own packets (they come back
	// in on lo).
	ChainNodePortsReject = "SVCP-NODEPORTS-REJECT"
	// ChainListeners guards the listeners the portals lead to. They are bound
	// to 0.0.0.0, so anyone who reaches a node address could connect to one
	// directly and be proxied without ever addressing the Service; this chain
	// lets through what conntrack says a portal redirected (ctstate DNAT) and
	// what is not a new connection, and REJECTs the other new connections.
	// Hooked from filter INPUT. (The IPv6
	// listeners are bound to ::, IPv6 only, and guarded the same way in
	// ip6tables.)
	//
	// Its first rule also keeps conntrack running in the namespace: with
	// iptables-nft the kernel tracks connections only while some rule needs
	// it, and every established proxied connection needs conntrack to keep
	// translating its REDIRECT, also when the last portal has gone (its
	// Service was deleted) or while Shutdown lets connections finish.
	ChainListeners = "SVCP-LISTENERS"
)

// hook is a rule that sends packets from a built-in chain to one of ours.
type hook struct {
	table iptables.Table
	chain string // built-in
	jump  string // ours
}

func (h hook) args() []string {
	return []string{"-m", "comment", "--comment", "svcproxy userspace", "-j", h.jump}
}

// hooks are appended (not prepended): the offload chains are prepended, so that a
// promoted port's kernel path is met before its portal (docs/architecture.md,
// "Hybrid: one path per port at a time").
var hooks = []hook{
	{iptables.TableFilter, "INPUT", ChainListeners},
	{iptables.TableFilter, "INPUT", ChainReject},
	{iptables.TableFilter, "INPUT", ChainNodePortsReject},
	{iptables.TableFilter, "FORWARD", ChainReject},
	{iptables.TableFilter, "OUTPUT", ChainReject},
	{iptables.TableNAT, "PREROUTING", ChainPortalsContainer},
	{iptables.TableNAT, "OUTPUT", ChainPortalsHost},
}

var (
	filterChains = []string{ChainListeners, ChainReject, ChainNodePortsReject}
	natChains    = []string{ChainPortalsContainer, ChainPortalsHost}
)

// Portal is what Render needs to know of one service port.
type Portal struct {
	Name     service.PortName
	Protocol service.Protocol // TCP or UDP
	// IPs are the addresses clients send to: ClusterIPs, external IPs, then
	// load-balancer IPs. Only those of the family rendered are written: the
	// IPv4 ones into iptables' text, the IPv6 ones into ip6tables'.
	IPs      []netip.Addr
	Port     uint16
	NodePort uint16 // 0: none
	// Listener is the local port the portals redirect to; 0 when it could not be
	// bound, which makes the port rejected like one without endpoints.
	Listener uint16
	// External are the addresses among IPs that bring external traffic
	// (external IPs, load-balancer IPs). When ExternalListener is not 0 (the
	// node port's listener, bound), their portals redirect there instead of to
	// Listener, so that externalTrafficPolicy applies to them as to the node
	// port.
	External         []netip.Addr
	ExternalListener uint16
	// Firewalled are the load-balancer IPs among IPs that
	// loadBalancerSourceRanges restrict, and Sources the source addresses and
	// ranges they accept (service.FirewallSources). Their portals redirect only
	// those sources; filter drops what else is sent to them, as iptables mode's
	// SVCP-FW- does. Without Sources, nothing is restricted.
	Firewalled []netip.Addr
	Sources    []string
	// HasEndpoints is false when the port has no usable endpoint anywhere
	// in the cluster: every address of it is rejected.
	HasEndpoints bool
	// NoInternalEndpoints: the port has endpoints, but none for its ClusterIP
	// traffic (internalTrafficPolicy Local, and none on this node). Its
	// ClusterIPs get no portal and are dropped, as kube-proxy drops them
	// ("has no local endpoints"); its external addresses and node port keep
	// theirs.
	NoInternalEndpoints bool
	// Excluded ports (not Config.Carries': hybrid mode promoted them to a
	// kernel path) get no
	// portal and no REJECT, only their listener's guard: connections a portal
	// brought in before still finish there.
	Excluded bool
}

// Render returns the iptables-restore text of the portals of one IP family
// (ip6tables-restore text for IPv6): the filter table first (so that the
// REJECTs are in place before a portal is removed), then nat. Every chain of
// ours is declared, so it is created or flushed; the hooks are not part of the
// text (EnsureRule adds them). Portals are rendered in the order given. The two
// families' texts differ only in the addresses, their masks (/32, /128) and
// the ICMP message of a REJECT: nat REDIRECT works in ip6tables as in
// iptables.
func Render(fam service.Family, portals []Portal) []byte {
	return renderRules(fam, portals).restore()
}

// rules are the portals of one family as rendered: each table's rules in
// order, each "CHAIN match... -j TARGET", an iptables-restore line without
// its "-A ". Render writes them all; changes writes what differs between two.
type rules struct{ filter, nat []string }

func renderRules(fam service.Family, portals []Portal) *rules {
	var listeners, filter, container, host []string
	add := func(to *[]string, format string, args ...any) { *to = append(*to, fmt.Sprintf(format, args...)) }
	listeners = append(listeners, ChainListeners+` -m conntrack --ctstate DNAT -m comment --comment "redirected by a portal" -j RETURN`)
	// The listeners' rules below reject only new connections; every other
	// packet leaves here, not after one rule per listener: the replies to
	// the proxy's own connections to endpoints come in through INPUT, and
	// a walk of 1,000 listeners' rules for each of them was half of
	// svcproxy's CPU in bench/kubeproxy's hybrid run at 1,000 Services.
	listeners = append(listeners, ChainListeners+` -m conntrack ! --ctstate NEW -m comment --comment "not a new connection" -j RETURN`)
	reject := "-j REJECT --reject-with icmp-port-unreachable"
	if fam == service.IPv6 {
		reject = "-j REJECT --reject-with icmp6-port-unreachable"
	}
	for _, p := range portals {
		proto := strings.ToLower(string(p.Protocol))
		if p.Listener != 0 {
			// Only new connections: a packet of an established one is never
			// dropped here, whatever conntrack recorded about it.
			add(&listeners, "%s -p %s -m comment --comment %q -m %s --dport %d -m conntrack --ctstate NEW %s", ChainListeners,
				proto, p.Name.String()+" listener, not through a portal", proto, p.Listener, reject)
		}
		if p.Excluded {
			continue
		}
		if !p.HasEndpoints || p.Listener == 0 {
			why := p.Name.String() + " has no endpoints"
			if p.HasEndpoints {
				why = p.Name.String() + " has no listener"
			}
			match := fmt.Sprintf("-p %s -m comment --comment %q -m %s --dport", proto, why, proto)
			for _, ip := range fam.Addrs(p.IPs) {
				add(&filter, "%s -d %s/%d %s %d %s", ChainReject, ip, fam.Bits(), match, p.Port, reject)
			}
			if p.NodePort != 0 {
				add(&filter, "%s %s %d %s", ChainNodePortsReject, match, p.NodePort, reject)
			}
			continue
		}
		match := fmt.Sprintf("-p %s -m comment --comment %q -m %s --dport", proto, p.Name.String(), proto)
		for _, ip := range fam.Addrs(p.IPs) {
			if p.NoInternalEndpoints && !slices.Contains(p.External, ip) {
				add(&filter, "%s -d %s/%d -p %s -m comment --comment %q -m %s --dport %d -j DROP", ChainReject, ip, fam.Bits(),
					proto, p.Name.String()+" has no local endpoints", proto, p.Port)
				continue
			}
			to := p.Listener
			if p.ExternalListener != 0 && slices.Contains(p.External, ip) {
				to = p.ExternalListener
			}
			sources := []string{""}
			if len(p.Sources) > 0 && slices.Contains(p.Firewalled, ip) {
				// Only the allowed sources are redirected; the rest keeps the
				// load-balancer IP as its destination, and filter drops it.
				sources = p.Sources
				add(&filter, "%s -d %s/%d -p %s -m comment --comment %q -m %s --dport %d -j DROP", ChainReject, ip, fam.Bits(),
					proto, p.Name.String()+" not in loadBalancerSourceRanges", proto, p.Port)
			}
			for _, src := range sources {
				if src != "" {
					src = "-s " + src + " "
				}
				rule := fmt.Sprintf("%s-d %s/%d %s %d -j REDIRECT --to-ports %d", src, ip, fam.Bits(), match, p.Port, to)
				container = append(container, ChainPortalsContainer+" "+rule)
				host = append(host, ChainPortalsHost+" "+rule)
			}
		}
	}
	return &rules{filter: append(listeners, filter...), nat: append(container, host...)}
}

// restore is the text that writes every chain of ours anew: each declared
// (created or flushed), then its rules appended.
func (r *rules) restore() []byte {
	var b bytes.Buffer
	writeTable(&b, iptables.TableFilter, filterChains, r.filter)
	writeTable(&b, iptables.TableNAT, natChains, r.nat)
	return b.Bytes()
}

func writeTable(b *bytes.Buffer, table iptables.Table, chains []string, rules []string) {
	fmt.Fprintf(b, "*%s\n", table)
	for _, c := range chains {
		fmt.Fprintf(b, ":%s - [0:0]\n", c)
	}
	for _, r := range rules {
		b.WriteString("-A " + r + "\n")
	}
	b.WriteString("COMMIT\n")
}

func (r *rules) equal(o *rules) bool {
	return slices.Equal(r.filter, o.filter) && slices.Equal(r.nat, o.nat)
}

// maxDeletes is how many rules a restore of the changes may delete; with
// more, every chain is written anew. iptables-nft compares the rule a "-D"
// line names with the rules of its chain, from the first: with 1,000
// portals, deleting the 3 rules of one took half as long as writing all
// 3,000, deleting the 300 of 100 portals at the ends of their chains 30
// times as long (docs/design.md, "The userspace portals").
const maxDeletes = 16

// changes returns the iptables-restore text that turns the rules last into
// want without declaring a chain (which would flush it): in each table, "-D"
// lines for the rules of last that want lacks, then "-A" lines for those of
// want that last lacks. A rule added goes to the end of its chain, not where
// a full restore puts it; the order of the portals does not matter (each
// rule matches its own address and port, or its own listener's port), and
// the two rules that must come first in SVCP-LISTENERS never change. ok is
// false when the text would delete more than maxDeletes rules.
func changes(last, want *rules) (text []byte, ok bool) {
	var b bytes.Buffer
	deletes := 0
	for _, t := range []struct {
		table      iptables.Table
		last, want []string
	}{{iptables.TableFilter, last.filter, want.filter}, {iptables.TableNAT, last.nat, want.nat}} {
		gone, added := diff(t.last, t.want)
		if len(gone)+len(added) == 0 {
			continue
		}
		deletes += len(gone)
		fmt.Fprintf(&b, "*%s\n", t.table)
		for _, r := range gone {
			b.WriteString("-D " + r + "\n")
		}
		for _, r := range added {
			b.WriteString("-A " + r + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes(), deletes <= maxDeletes
}

// diff returns the rules of last that want lacks and the rules of want that
// last lacks, each in its list's order; a rule listed twice counts twice.
func diff(last, want []string) (gone, added []string) {
	left := make(map[string]int, len(last)) // last's rules want has not matched
	for _, r := range last {
		left[r]++
	}
	for _, r := range want {
		if left[r] > 0 {
			left[r]--
		} else {
			added = append(added, r)
		}
	}
	for _, r := range last {
		if left[r] > 0 {
			left[r]--
			gone = append(gone, r)
		}
	}
	return gone, added
}

// renderCleanup returns the text that deletes every chain of ours: declared (so
// they exist, flushed) and then removed. The hooks must be gone first.
func renderCleanup() []byte {
	return append(iptables.DeleteChains(iptables.TableNAT, natChains...),
		iptables.DeleteChains(iptables.TableFilter, filterChains...)...)
}

// portalsOf lists the portals of the served ports, those cfg.Carries does
// not carry marked Excluded, sorted by port name so that the rendered text is
// stable.
func portalsOf(ports map[service.PortName]*servicePort, cfg Config) []Portal {
	out := make([]Portal, 0, len(ports))
	for name, sp := range ports {
		sp.mu.Lock()
		port := sp.port
		pt := Portal{
			Name:                port.Name,
			Protocol:            port.Protocol,
			IPs:                 slices.Concat(port.Service.ClusterIPs, port.Service.ExternalIPs, port.Service.LoadBalancerIPs),
			Port:                port.Port,
			NodePort:            port.NodePort,
			HasEndpoints:        sp.hasAny,
			NoInternalEndpoints: sp.noInternal,
			Excluded:            !cfg.carries(name),
		}
		if sp.listener != nil {
			pt.Listener = sp.listener.port()
		}
		pt.External = slices.Concat(port.Service.ExternalIPs, port.Service.LoadBalancerIPs)
		if svc := port.Service; len(svc.LoadBalancerSourceRanges) > 0 && len(svc.LoadBalancerIPs) > 0 {
			fam := cmp.Or(cfg.Family, service.IPv4)
			pt.Firewalled = fam.Addrs(svc.LoadBalancerIPs)
			pt.Sources = service.FirewallSources(fam.Prefixes(svc.LoadBalancerSourceRanges), pt.Firewalled, cfg.NodeIP)
		}
		if sp.nodePort != nil {
			pt.ExternalListener = sp.nodePort.port()
		}
		sp.mu.Unlock()
		out = append(out, pt)
	}
	slices.SortFunc(out, func(a, b Portal) int { return compareNames(a.Name, b.Name) })
	return out
}
