package ipvs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/kernel/ipset"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// IPVS rewrites the destination of a packet but not its source. A client outside the
// cluster CIDR (the node itself, another host) would get its reply straight from the
// pod, with the pod's address as source, and drop it. So, as kube-proxy's ipvs mode
// does, such traffic is marked on the way in and masqueraded on the way out, by a
// handful of rules whose number does not depend on the number of services: the
// service addresses are members of ip sets, and one rule matches each set.
//
// The chain names do not collide with offload/iptables' (SVCP-SERVICES,
// SVCP-POSTROUTING, SVCP-MARK-MASQ, SVCP-SVC-...): both dataplanes may have rules
// in the same namespace (hybrid mode, or a switch of --mode).
const (
	chainServices    = "SVCP-IPVS-SERVICES"    // nat: mark service traffic that needs SNAT
	chainMarkMasq    = "SVCP-IPVS-MARK-MASQ"   // nat: set the mark
	chainPostrouting = "SVCP-IPVS-POSTROUTING" // nat: MASQUERADE what is marked

	// SetClusterIPs holds ClusterIP,proto:port of every service port (kube-proxy's
	// KUBE-CLUSTER-IP).
	SetClusterIPs = "SVCP-IPVS-CLUSTER-IP"
	// SetExternal holds externalIP/LoadBalancer IP,proto:port and nodeIP,proto:NodePort
	// of the ports whose external traffic policy is Cluster: always masqueraded
	// (kube-proxy's KUBE-EXTERNAL-IP, KUBE-LOAD-BALANCER, KUBE-NODE-PORT-*).
	SetExternal = "SVCP-IPVS-EXTERNAL"
	// SetLoopback holds endpointIP,proto:port,endpointIP: a pod that reaches itself
	// through its service is masqueraded, or its own reply would not match the
	// connection (kube-proxy's KUBE-LOOP-BACK).
	SetLoopback = "SVCP-IPVS-LOOPBACK"
)

// ourChains are the nat chains of this file, in declaration order. Each
// family's are in its own iptables (iptables or ip6tables).
var ourChains = []string{chainServices, chainMarkMasq, chainPostrouting}

// ourSets are the ip sets of this file for family fam, with their types. Sets
// are not per family in the kernel: the IPv6 ones are named "SVCP-6-IPVS-..."
// (kube-proxy's "KUBE-6-" for its IPv6 sets).
func ourSets(fam service.Family) []ipset.Set {
	family := ipset.Inet
	if fam == service.IPv6 {
		family = ipset.Inet6
	}
	return []ipset.Set{
		{Name: SetName(fam, SetClusterIPs), Type: ipset.HashIPPort, Family: family},
		{Name: SetName(fam, SetExternal), Type: ipset.HashIPPort, Family: family},
		{Name: SetName(fam, SetLoopback), Type: ipset.HashIPPortIP, Family: family},
	}
}

// SetName is the name of set (SetClusterIPs, ...) for family fam: as it is for
// IPv4, "SVCP-6-" for "SVCP-" for IPv6.
func SetName(fam service.Family, set string) string {
	if fam == service.IPv6 {
		return strings.Replace(set, "SVCP-", "SVCP-6-", 1)
	}
	return set
}

// masqHooks jump from the built-in nat chains to ours. They are ensured with
// EnsureRule (a --noflush restore cannot "ensure" a rule in a chain it does not own)
// and deleted by Cleanup. Prepended, like offload/iptables' hooks: a mark is all they
// add, so their order against the userspace portals does not matter.
var masqHooks = []struct {
	chain string
	args  []string
}{
	{"PREROUTING", []string{"-m", "comment", "--comment", "svcproxy ipvs service traffic", "-j", chainServices}},
	{"OUTPUT", []string{"-m", "comment", "--comment", "svcproxy ipvs service traffic", "-j", chainServices}},
	{"POSTROUTING", []string{"-m", "comment", "--comment", "svcproxy ipvs postrouting rules", "-j", chainPostrouting}},
}

// renderRules renders the nat rules for cfg as iptables-restore text. They depend on
// the configuration only, never on the services: those are in the sets.
func renderRules(cfg *Config) []byte {
	mark := fmt.Sprintf("0x%08x", cfg.Mark())
	clusterIPs, external, loopback := SetName(cfg.Family, SetClusterIPs), SetName(cfg.Family, SetExternal), SetName(cfg.Family, SetLoopback)
	var b bytes.Buffer
	b.WriteString("*nat\n")
	for _, c := range ourChains {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	rule := func(chain, comment string, args ...string) {
		b.WriteString("-A " + chain)
		if comment != "" {
			fmt.Fprintf(&b, " -m comment --comment %q", comment)
		}
		b.WriteString(" " + strings.Join(args, " ") + "\n")
	}
	switch {
	case cfg.MasqueradeAll:
		rule(chainServices, "svcproxy ipvs: cluster IP, masquerade all",
			"-m set --match-set", clusterIPs, "dst,dst -j", chainMarkMasq)
	case cfg.ClusterCIDR.IsValid():
		rule(chainServices, "svcproxy ipvs: cluster IP from outside the cluster CIDR",
			"-m set --match-set", clusterIPs, "dst,dst ! -s", cfg.ClusterCIDR.Masked().String(), "-j", chainMarkMasq)
	}
	rule(chainServices, "svcproxy ipvs: external IP, load balancer IP or node port",
		"-m set --match-set", external, "dst,dst -j", chainMarkMasq)
	rule(chainMarkMasq, "", "-j MARK --or-mark", mark)
	rule(chainPostrouting, "svcproxy ipvs: hairpin, an endpoint reaching itself through its service",
		"-m set --match-set", loopback, "dst,dst,src -j MASQUERADE")
	rule(chainPostrouting, "", "-m mark ! --mark", mark+"/"+mark, "-j RETURN")
	// Clear the mark so a packet that re-enters the stack (a tunnel) is not
	// masqueraded twice (kube-proxy does the same).
	rule(chainPostrouting, "", "-j MARK --xor-mark", mark)
	rule(chainPostrouting, "svcproxy ipvs: service traffic requiring SNAT", "-j MASQUERADE --random-fully")
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

// wantedSets are the sets w asks for in family fam, members sorted.
func wantedSets(fam service.Family, w wanted) []ipset.Set {
	members := map[string]map[string]bool{SetName(fam, SetClusterIPs): w.clusterIPs,
		SetName(fam, SetExternal): w.external, SetName(fam, SetLoopback): w.loopback}
	out := ourSets(fam)
	for i := range out {
		out[i].Members = slices.Sorted(maps.Keys(members[out[i].Name]))
	}
	return out
}

// syncMasq makes the ip sets and the nat rules match w: the sets first (a rule can
// only name a set that exists), then the rules, then the hooks. Each is written only
// when the kernel differs, so a Sync that changes nothing writes nothing.
func (d *Dataplane) syncMasq(ctx context.Context, w wanted) error {
	if d.cfg.IPTables == nil || d.cfg.IPSets == nil {
		return nil
	}
	have, err := d.cfg.IPSets.List(ctx)
	if err != nil {
		return fmt.Errorf("masquerade: %w", err)
	}
	var stale []ipset.Set
	for _, s := range wantedSets(d.cfg.Family, w) {
		if !sameSet(s, have) {
			stale = append(stale, s)
		}
	}
	if len(stale) > 0 {
		if err := d.cfg.IPSets.Restore(ctx, ipset.ReplaceScript(stale...)); err != nil {
			return fmt.Errorf("masquerade: %w", err)
		}
	}
	rules := renderRules(&d.cfg)
	saved, err := d.cfg.IPTables.Save(ctx, kiptables.TableNAT)
	if err != nil {
		return fmt.Errorf("masquerade: %w", err)
	}
	if !maps.Equal(ruleCounts(saved), ruleCounts(rules)) {
		if err := d.cfg.IPTables.Restore(ctx, rules); err != nil {
			d.restoreFailures.Add(1)
			return fmt.Errorf("masquerade: %w", err)
		}
	}
	for _, h := range masqHooks {
		if hooked(saved, h.chain, h.args[len(h.args)-1]) {
			continue // the nat table just saved shows it: no `iptables -C` per sync
		}
		if _, err := d.cfg.IPTables.EnsureRule(ctx, kiptables.Prepend, kiptables.TableNAT, h.chain, h.args...); err != nil {
			return fmt.Errorf("masquerade: hook nat/%s -> %s: %w", h.chain, h.args[len(h.args)-1], err)
		}
	}
	return nil
}

// hooked reports whether iptables-save text has a rule in chain jumping to target.
func hooked(saved []byte, chain, target string) bool {
	for line := range strings.Lines(string(saved)) {
		if strings.HasPrefix(line, "-A "+chain+" ") && strings.HasSuffix(strings.TrimSpace(line), "-j "+target) {
			return true
		}
	}
	return false
}

func sameSet(want ipset.Set, have []ipset.Set) bool {
	for _, h := range have {
		if h.Name == want.Name {
			m := slices.Clone(h.Members)
			slices.Sort(m)
			return h.Type == want.Type && h.Family == want.Family && slices.Equal(m, want.Members)
		}
	}
	return false
}

// ruleCounts counts the rules of our chains in iptables-save or -restore text (the
// kernel prints rules in its own canonical form, so text is not compared; a chain
// that was flushed, deleted or edited by hand changes its count, or is missing).
func ruleCounts(text []byte) map[string]int {
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) > 0 && strings.HasPrefix(f[0], ":") && slices.Contains(ourChains, f[0][1:]):
			out[f[0][1:]] += 0
		case len(f) > 1 && f[0] == "-A" && slices.Contains(ourChains, f[1]):
			out[f[1]]++
		}
	}
	return out
}

// cleanupMasq removes the hooks, then the chains (flushed and deleted in one
// restore), then the sets, which the kernel keeps while a rule names them.
func (d *Dataplane) cleanupMasq(ctx context.Context) error {
	if d.cfg.IPTables == nil || d.cfg.IPSets == nil {
		return nil
	}
	var errs []error
	for _, h := range masqHooks {
		if err := d.cfg.IPTables.DeleteRule(ctx, kiptables.TableNAT, h.chain, h.args...); err != nil {
			errs = append(errs, fmt.Errorf("masquerade: delete hook nat/%s: %w", h.chain, err))
		}
	}
	if err := d.cfg.IPTables.Restore(ctx, kiptables.DeleteChains(kiptables.TableNAT, ourChains...)); err != nil {
		errs = append(errs, fmt.Errorf("masquerade: delete chains: %w", err))
	}
	have, err := d.cfg.IPSets.List(ctx)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("masquerade: %w", err))...)
	}
	var names []string
	for _, s := range have {
		for _, o := range ourSets(d.cfg.Family) {
			if s.Name == o.Name || s.Name == ipset.TempName(o.Name) {
				names = append(names, s.Name)
			}
		}
	}
	if len(names) > 0 {
		if err := d.cfg.IPSets.Restore(ctx, ipset.DestroyScript(names...)); err != nil {
			errs = append(errs, fmt.Errorf("masquerade: %w", err))
		}
	}
	return errors.Join(errs...)
}

// syncSysctls sets the parameters of Config.Sysctls once, writing only those that
// differ.
func (d *Dataplane) syncSysctls(ctx context.Context) error {
	if d.cfg.Sysctls == nil || d.sysctlsDone {
		return nil
	}
	want := [][2]string{
		{"net.ipv4.vs.expire_nodest_conn", "1"},
		{"net.ipv4.vs.expire_quiescent_template", "1"},
	}
	if d.cfg.IPTables != nil && d.cfg.IPSets != nil {
		want = append(want, [2]string{"net.ipv4.vs.conntrack", "1"})
	}
	if d.cfg.StrictARP {
		want = append(want, [2]string{"net.ipv4.conf.all.arp_ignore", "1"}, [2]string{"net.ipv4.conf.all.arp_announce", "2"})
	}
	for _, kv := range want {
		v, err := d.cfg.Sysctls.Sysctl(ctx, kv[0])
		if err == nil && v == kv[1] {
			continue
		}
		if err := d.cfg.Sysctls.SetSysctl(ctx, kv[0], kv[1]); err != nil {
			return err
		}
	}
	d.sysctlsDone = true
	return nil
}
