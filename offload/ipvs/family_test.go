package ipvs

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/ipset"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/kernel/link"
	"github.com/svcproxy/svcproxy/service"
)

var (
	nodeIP6 = netip.MustParseAddr("2001:db8:19::1")
	pod6    = netip.MustParseAddr("2001:db8:19::5:5")
)

// dualWeb is web with a second ClusterIP, 2001:db8:18::10, endpoints of both
// families, and a NodePort.
func dualWeb(s *service.Service) {
	s.ClusterIPs = append(s.ClusterIPs, netip.MustParseAddr("2001:db8:18::10"))
	s.Type = service.TypeNodePort
	s.Ports[0].NodePort = 30080
	for _, a := range []string{"2001:db8:19::1:2", "2001:db8:19::1:3"} {
		s.Ports[0].Endpoints = append(s.Ports[0].Endpoints, service.Endpoint{
			Addr: netip.AddrPortFrom(netip.MustParseAddr(a), 8080), Ready: true, Serving: true, NodeName: "node-a"})
	}
}

// Two Dataplanes, one per family, share IPVS and the dummy interface: each
// serves its family's virtual servers and addresses, and leaves the other's
// alone when it syncs, retires or cleans up.
func TestFamiliesShareIPVS(t *testing.T) {
	ctx := context.Background()
	ipvs, links := kipvs.NewFake(), link.NewFake()
	proxier := func(fam service.Family) *Dataplane {
		p, err := New(Config{Node: dataplane.Node{Family: fam, NodeName: "node-a", NodePortIPs: []netip.Addr{netip.MustParseAddr("198.19.0.1"), nodeIP6}}, IPVS: ipvs, Links: links})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p4, p6 := proxier(service.IPv4), proxier(service.IPv6)
	snap := service.NewSnapshot([]*service.Service{web([]string{"198.19.1.2", "198.19.1.3"}, dualWeb)}, nil)
	for _, p := range []*Dataplane{p4, p6} {
		if err := p.Sync(ctx, snap.Family(p.cfg.Family)); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{ipvs: ipvs, links: links}
	both := `
		TCP  198.18.0.10:80 rr
		  -> 198.19.1.2:8080              Masq    1      0          0
		  -> 198.19.1.3:8080              Masq    1      0          0
		TCP  198.19.0.1:30080 rr
		  -> 198.19.1.2:8080              Masq    1      0          0
		  -> 198.19.1.3:8080              Masq    1      0          0
		TCP  [2001:db8:18::10]:80 rr
		  -> [2001:db8:19::1:2]:8080      Masq    1      0          0
		  -> [2001:db8:19::1:3]:8080      Masq    1      0          0
		TCP  [2001:db8:19::1]:30080 rr
		  -> [2001:db8:19::1:2]:8080      Masq    1      0          0
		  -> [2001:db8:19::1:3]:8080      Masq    1      0          0`
	f.want(t, both)
	if got, want := links.Dump(), "svcp-ipvs0 dummy up 198.18.0.10/32 2001:db8:18::10/128\n"; got != want {
		t.Errorf("links = %q, want %q", got, want)
	}
	// A second sync of either family changes nothing of the other's.
	for _, p := range []*Dataplane{p6, p4} {
		if err := p.Sync(ctx, snap.Family(p.cfg.Family)); err != nil {
			t.Fatal(err)
		}
	}
	f.want(t, both)

	// IPv4 loses the Service: its virtual servers retire, IPv6's stay.
	if err := p4.Sync(ctx, service.NewSnapshot(nil, nil)); err != nil {
		t.Fatal(err)
	}
	f.want(t, both[strings.Index(both, "TCP  [2001"):])
	if got, want := links.Dump(), "svcp-ipvs0 dummy up 2001:db8:18::10/128\n"; got != want {
		t.Errorf("links = %q, want %q", got, want)
	}

	// Cleanup in either order: the link goes with the last service address.
	if err := p4.Sync(ctx, snap.Family(service.IPv4)); err != nil {
		t.Fatal(err)
	}
	if err := p4.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	f.want(t, both[strings.Index(both, "TCP  [2001"):])
	if got, want := links.Dump(), "svcp-ipvs0 dummy up 2001:db8:18::10/128\n"; got != want {
		t.Errorf("after the IPv4 Cleanup: links = %q, want %q", got, want)
	}
	if err := p6.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ipvs.Dump(); strings.Contains(got, "TCP") {
		t.Errorf("after both Cleanups:\n%s", got)
	}
	if got := links.Dump(); got != "" {
		t.Errorf("after both Cleanups: links = %q, want none", got)
	}
}

func TestNewConfigFamily(t *testing.T) {
	_, err := New(Config{Node: dataplane.Node{Family: service.IPv6, ClusterCIDR: clusterCIDR}, IPVS: kipvs.NewFake(), Links: link.NewFake()})
	if err == nil || !strings.Contains(err.Error(), "ClusterCIDR 198.19.0.0/16: not an IPv6 prefix") {
		t.Errorf("IPv6 Dataplane with an IPv4 cluster CIDR: %v", err)
	}
}

// newMasqFixture6 is newMasqFixture for the IPv6 Dataplane: ip6tables rules over
// the SVCP-6-IPVS-* sets of family inet6.
func newMasqFixture6(t *testing.T) *masqFixture {
	t.Helper()
	f := &masqFixture{fixture: &fixture{ipvs: kipvs.NewFake(), links: link.NewFake()},
		ipt: kiptables.NewFakeFamily(kiptables.IPv6), sets: ipset.NewFake(), sysctls: &link.FakeSysctls{}}
	f.ipt.SetLocalAddrs(nodeIP6, netip.MustParseAddr("2001:db8:18::10"))
	f.sets.OnRestore = func(sets []ipset.Set) {
		for _, s := range sets {
			if err := f.ipt.SetIPSet(s.Name, s.Members...); err != nil {
				t.Errorf("mirror ipset %s: %v", s.Name, err)
			}
		}
	}
	p, err := New(Config{Node: dataplane.Node{Family: service.IPv6, NodeName: "node-a", NodePortIPs: []netip.Addr{netip.MustParseAddr("198.19.0.1"), nodeIP6}, ClusterCIDR: netip.MustParsePrefix("2001:db8:19::/64")}, IPVS: f.ipvs, Links: f.links,
		IPTables: f.ipt, IPSets: f.sets,
		Sysctls: f.sysctls})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// The IPv6 masquerade: the same rules in ip6tables, over sets of their own.
func TestMasqIPv6(t *testing.T) {
	f := newMasqFixture6(t)
	f.sync(t, web([]string{"198.19.1.2"}, dualWeb))
	_, rules := f.ipt.Restores()
	w, _ := f.p.desired(service.NewSnapshot([]*service.Service{web([]string{"198.19.1.2"}, dualWeb)}, nil))
	golden(t, "masq-ipv6", "# ipset restore\n"+string(ipset.ReplaceScript(wantedSets(service.IPv6, w)...))+
		"# ip6tables-restore\n"+string(rules))

	vip := netip.MustParseAddrPort("[2001:db8:18::10]:80")
	real := netip.MustParseAddrPort("[2001:db8:19::1:2]:8080")
	for _, tc := range []struct {
		name     string
		in       kiptables.Packet
		wantMasq bool
	}{
		{"pod to ClusterIP keeps its source", kiptables.Packet{Src: pod6, Dst: vip}, false},
		{"outsider to ClusterIP", kiptables.Packet{Src: netip.MustParseAddr("2001:db8:ff::7"), Dst: vip}, true},
		{"pod to NodePort", kiptables.Packet{Src: pod6, Dst: netip.AddrPortFrom(nodeIP6, 30080)}, true},
		{"hairpin", kiptables.Packet{Src: real.Addr(), Dst: vip}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := f.ipt.Trace(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := f.ipt.Trace(kiptables.Packet{Local: true, Src: tc.in.Src, Dst: real, Mark: in.Mark})
			if err != nil {
				t.Fatal(err)
			}
			if out.Masquerade != tc.wantMasq {
				t.Errorf("masquerade = %v, want %v\n%s\n%s", out.Masquerade, tc.wantMasq, in, out)
			}
		})
	}
	if err := f.p.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.ipt.Dump() + f.sets.Dump(); strings.Contains(got, "SVCP") {
		t.Errorf("after Cleanup:\n%s", got)
	}
}
