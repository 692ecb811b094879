package ipvs

import (
	"context"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/kernel/ipset"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/kernel/link"
	"github.com/svcproxy/svcproxy/service"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// golden compares got with testdata/name.golden (or rewrites it with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update once)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n%s\nwant:\n%s", p, got, want)
	}
}

var (
	clusterCIDR = netip.MustParsePrefix("198.19.0.0/16")
	nodeIP      = netip.MustParseAddr("198.19.0.1")
	outsider    = netip.MustParseAddr("192.0.2.7") // not in the cluster CIDR
	pod         = netip.MustParseAddr("198.19.5.5")
)

// masqFixture is a Dataplane with every kernel Fake: the ip sets are mirrored into the
// iptables Fake so packets can be traced through the rules.
type masqFixture struct {
	*fixture
	ipt     *kiptables.Fake
	sets    *ipset.Fake
	sysctls *link.FakeSysctls
}

func newMasqFixture(t *testing.T, edit func(*Config)) *masqFixture {
	t.Helper()
	f := &masqFixture{fixture: &fixture{ipvs: nil}, ipt: kiptables.NewFake(), sets: ipset.NewFake(), sysctls: &link.FakeSysctls{}}
	base := newFixture(t)
	f.fixture = base
	// The service IPs are local: they are on the dummy interface.
	f.ipt.SetLocalAddrs(nodeIP, netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.1.1"))
	f.sets.OnRestore = func(sets []ipset.Set) {
		for _, s := range sets {
			if err := f.ipt.SetIPSet(s.Name, s.Members...); err != nil {
				t.Errorf("mirror ipset %s: %v", s.Name, err)
			}
		}
	}
	cfg := base.p.cfg
	cfg.IPTables, cfg.IPSets, cfg.Sysctls, cfg.ClusterCIDR = f.ipt, f.sets, f.sysctls, clusterCIDR
	if edit != nil {
		edit(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

func nodePortWeb(s *service.Service) {
	s.Type = service.TypeNodePort
	s.Ports[0].NodePort = 30080
	s.ExternalIPs = []netip.Addr{netip.MustParseAddr("198.18.1.1")}
}

func TestMasqGolden(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"masq-cluster-cidr", nil},
		{"masq-all", func(c *Config) { c.MasqueradeAll = true }},
		{"masq-no-cidr", func(c *Config) { c.ClusterCIDR = netip.Prefix{} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newMasqFixture(t, tc.edit)
			f.sync(t, web([]string{"198.19.1.2", "198.19.1.3"}, nodePortWeb, withUDP))
			_, lastRules := f.ipt.Restores()
			w, _ := f.p.desired(service.NewSnapshot([]*service.Service{web([]string{"198.19.1.2", "198.19.1.3"}, nodePortWeb, withUDP)}, nil))
			golden(t, tc.name, "# ipset restore\n"+string(ipset.ReplaceScript(wantedSets(service.IPv4, w)...))+
				"# iptables-restore\n"+string(lastRules))
		})
	}
}

// The rules do not grow with the services: only the sets do.
func TestMasqRulesConstant(t *testing.T) {
	f := newMasqFixture(t, nil)
	f.sync(t, web([]string{"198.19.1.2"}))
	before := f.ipt.Dump()
	var svcs []*service.Service
	for i := range 50 {
		svc := web([]string{"198.19.1.2"})
		svc.Name = "web" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		svc.ClusterIPs = []netip.Addr{netip.AddrFrom4([4]byte{198, 18, 2, byte(i)})}
		svcs = append(svcs, svc)
	}
	if err := f.p.Sync(context.Background(), service.NewSnapshot(svcs, nil)); err != nil {
		t.Fatal(err)
	}
	if after := f.ipt.Dump(); after != before {
		t.Errorf("rules changed with 50 services:\n%s\nwas:\n%s", after, before)
	}
	sets, _ := f.sets.List(context.Background())
	if n := len(sets[0].Members); sets[0].Name != SetClusterIPs || n != 50 {
		t.Errorf("%s has %d members, want 50", sets[0].Name, n)
	}
}

// TestMasqTrace sends packets through the rules. IPVS itself is not modelled by the
// tracer, so each connection is traced in its two halves: the client's packet to the
// service address (PREROUTING or OUTPUT: is it marked?), then the packet IPVS sends
// on to the real server (OUTPUT, POSTROUTING: is it masqueraded?). A packet the node
// sends itself is taken by IPVS in OUTPUT and goes on to POSTROUTING with its new
// destination: one trace tells.
func TestMasqTrace(t *testing.T) {
	vip := netip.MustParseAddrPort("198.18.0.10:80")
	tests := []struct {
		name     string
		edit     func(*Config)
		in       kiptables.Packet
		real     netip.AddrPort
		wantMasq bool
	}{
		{"pod to ClusterIP keeps its source", nil, kiptables.Packet{Src: pod, Dst: vip}, ap("198.19.1.2:8080"), false},
		{"outsider to ClusterIP", nil, kiptables.Packet{Src: outsider, Dst: vip}, ap("198.19.1.2:8080"), true},
		{"node to ClusterIP", nil, kiptables.Packet{Local: true, Src: netip.MustParseAddr("198.18.0.10"), Dst: vip}, ap("198.19.1.2:8080"), true},
		{"udp pod to ClusterIP", nil, kiptables.Packet{Proto: "udp", Src: pod, Dst: ap("198.18.0.10:53")}, ap("198.19.1.2:8080"), false},
		{"masquerade-all", func(c *Config) { c.MasqueradeAll = true }, kiptables.Packet{Src: pod, Dst: vip}, ap("198.19.1.2:8080"), true},
		{"no cluster CIDR", func(c *Config) { c.ClusterCIDR = netip.Prefix{} }, kiptables.Packet{Src: outsider, Dst: vip}, ap("198.19.1.2:8080"), false},
		{"pod to NodePort", nil, kiptables.Packet{Src: pod, Dst: netip.AddrPortFrom(nodeIP, 30080)}, ap("198.19.1.3:8080"), true},
		{"outsider to external IP", nil, kiptables.Packet{Src: outsider, Dst: ap("198.18.1.1:80")}, ap("198.19.1.3:8080"), true},
		{"hairpin: endpoint to itself", nil, kiptables.Packet{Src: netip.MustParseAddr("198.19.1.2"), Dst: vip}, ap("198.19.1.2:8080"), true},
		{"not a service", nil, kiptables.Packet{Src: outsider, Dst: ap("198.18.0.10:81")}, ap("198.19.1.2:81"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newMasqFixture(t, tc.edit)
			f.sync(t, web([]string{"198.19.1.2", "198.19.1.3"}, nodePortWeb, withUDP))
			in, err := f.ipt.Trace(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			out := in
			if !tc.in.Local {
				out, err = f.ipt.Trace(kiptables.Packet{Proto: tc.in.Proto, Local: true, Src: tc.in.Src, Dst: tc.real, Mark: in.Mark})
				if err != nil {
					t.Fatal(err)
				}
			}
			if out.Masquerade != tc.wantMasq {
				t.Errorf("masquerade = %v, want %v\nto the service:\n%s\nto the real server:\n%s", out.Masquerade, tc.wantMasq, in, out)
			}
		})
	}
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// TestMasqConverges: a second Sync writes nothing; what was changed by hand is put
// back; Cleanup removes it all, twice without error.
func TestMasqConverges(t *testing.T) {
	ctx := context.Background()
	f := newMasqFixture(t, func(c *Config) { c.StrictARP = true })
	svc := web([]string{"198.19.1.2"})
	f.sync(t, svc)
	ipsets, rules := f.sets.Restores(), restores(f.ipt)
	sys, sysWrites := f.sysctls.Values()
	f.sync(t, svc)
	if f.sets.Restores() != ipsets || restores(f.ipt) != rules {
		t.Errorf("second Sync: %d ipset and %d iptables restores, want none", f.sets.Restores()-ipsets, restores(f.ipt)-rules)
	}
	for k, v := range map[string]string{
		"net.ipv4.vs.conntrack": "1", "net.ipv4.vs.expire_nodest_conn": "1", "net.ipv4.vs.expire_quiescent_template": "1",
		"net.ipv4.conf.all.arp_ignore": "1", "net.ipv4.conf.all.arp_announce": "2",
	} {
		if sys[k] != v {
			t.Errorf("sysctl %s = %q, want %q", k, sys[k], v)
		}
	}
	if _, n := f.sysctls.Values(); n != sysWrites {
		t.Errorf("second Sync wrote %d sysctls, want none", n-sysWrites)
	}

	want := f.ipt.Dump()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.ipt.Restore(ctx, []byte("*nat\n:"+chainPostrouting+" - [0:0]\nCOMMIT\n"))) // flushed by hand
	must(f.ipt.DeleteRule(ctx, kiptables.TableNAT, "PREROUTING", masqHooks[0].args...))
	must(f.sets.Restore(ctx, []byte("flush "+SetClusterIPs+"\n")))
	f.sync(t, svc)
	if got := f.ipt.Dump(); got != want {
		t.Errorf("rules not repaired:\n%s\nwant:\n%s", got, want)
	}
	if sets, _ := f.sets.List(ctx); len(sets[0].Members) != 1 {
		t.Errorf("set %s not repaired: %v", sets[0].Name, sets[0].Members)
	}

	for range 2 {
		must(f.p.Cleanup(ctx))
		if got := f.ipt.Dump(); strings.Contains(got, "SVCP-IPVS") {
			t.Errorf("after Cleanup, rules left:\n%s", got)
		}
		if got := f.sets.Dump(); got != "" {
			t.Errorf("after Cleanup, sets left:\n%s", got)
		}
	}
}

func restores(f *kiptables.Fake) int { n, _ := f.Restores(); return n }
