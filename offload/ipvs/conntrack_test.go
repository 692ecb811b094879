package ipvs

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/service"
)

// dnsService is default/dns: UDP port 53 on ClusterIP 198.18.0.11 and
// NodePort 30053, to port 8080 of eps.
func dnsService(eps ...string) *service.Service {
	svc := web(eps, withUDP)
	svc.NamespacedName.Name = "dns"
	svc.ClusterIPs = []netip.Addr{netip.MustParseAddr("198.18.0.11")}
	svc.Type = service.TypeNodePort
	svc.Ports = svc.Ports[1:]
	svc.Ports[0].Name.NamespacedName = svc.NamespacedName
	svc.Ports[0].NodePort = 30053
	return svc
}

// flow is an entry from a client to dst whose reply comes from nat.
func flow(proto, dst, nat string) conntrack.Flow {
	return conntrack.Flow{Protocol: proto, Src: netip.MustParseAddrPort("198.19.0.50:5000"),
		OrigDst: netip.MustParseAddrPort(dst), DstNAT: netip.MustParseAddrPort(nat)}
}

// The UDP entries a sync leaves stale go: at the first sync, those of served
// frontends that did not go to a real server (a userspace portal's REDIRECT,
// a node port's); after a real server left, those it had; after a Service
// left, every entry of its frontends. Entries to a real server stay, TCP
// entries and entries of addresses that are not ours stay, and an unchanged
// selection walks no table.
func TestSyncConntrack(t *testing.T) {
	f := newFixture(t)
	live := flow("udp", "198.18.0.10:53", "198.19.1.2:8080")
	toGone := flow("udp", "198.18.0.10:53", "198.19.1.3:8080")
	redirected := flow("udp", "198.18.0.10:53", "198.19.0.1:40000")
	nodePortStale := flow("udp", "198.19.0.1:30053", "198.19.0.1:40001")
	dnsLive := flow("udp", "198.18.0.11:53", "198.19.1.4:8080")
	dnsNodePort := flow("udp", "198.19.0.1:30053", "198.19.1.4:8080")
	tcpStale := flow("tcp", "198.18.0.10:80", "198.19.0.1:40002")
	tcpDNS := flow("tcp", "198.18.0.11:53", "198.19.1.4:8080")
	other := flow("udp", "198.18.0.99:53", "198.19.0.1:40003")
	f.ct.Add(live, toGone, redirected, nodePortStale, dnsLive, dnsNodePort, tcpStale, tcpDNS, other)
	wantFlows := func(what string, want ...conntrack.Flow) {
		t.Helper()
		if got := f.ct.Flows(); !slices.Equal(got, want) {
			t.Errorf("%s: flows\n%v\nwant\n%v", what, got, want)
		}
	}

	f.sync(t, web([]string{"198.19.1.2", "198.19.1.3"}, withUDP), dnsService("198.19.1.4"))
	wantFlows("first sync", live, toGone, dnsLive, dnsNodePort, tcpStale, tcpDNS, other)
	stales := f.ct.Stales()
	if len(stales) != 1 {
		t.Fatalf("first sync: %d table walks, want 1", len(stales))
	}
	want := map[netip.AddrPort][]netip.Addr{
		netip.MustParseAddrPort("198.18.0.10:53"):   addrs("198.19.1.2", "198.19.1.3"),
		netip.MustParseAddrPort("198.18.0.11:53"):   addrs("198.19.1.4"),
		netip.MustParseAddrPort("198.19.0.1:30053"): addrs("198.19.1.4"),
	}
	if s := stales[0]; s.Family != conntrack.IPv4 || len(s.Frontends) != len(want) || len(s.NodePorts) != 0 {
		t.Errorf("first sync: selection %+v, want the UDP frontends %v", s, want)
	}
	for fe, eps := range want {
		if got := stales[0].Frontends[fe]; !slices.Equal(got, eps) {
			t.Errorf("selection of %s: %v, want %v", fe, got, eps)
		}
	}

	f.sync(t, web([]string{"198.19.1.2", "198.19.1.3"}, withUDP), dnsService("198.19.1.4"))
	if n := len(f.ct.Stales()); n != 1 {
		t.Errorf("the same selection again: %d table walks in all, want still 1", n)
	}

	f.sync(t, web([]string{"198.19.1.2"}, withUDP), dnsService("198.19.1.4"))
	wantFlows("198.19.1.3 left", live, dnsLive, dnsNodePort, tcpStale, tcpDNS, other)
	if n := len(f.ct.Stales()); n != 2 {
		t.Errorf("a real server left: %d table walks in all, want 2", n)
	}

	f.sync(t, web([]string{"198.19.1.2"}, withUDP))
	wantFlows("default/dns deleted", live, tcpStale, tcpDNS, other)
	wantFilters := []conntrack.Filter{
		{Protocol: "udp", OrigDst: netip.MustParseAddr("198.18.0.11"), OrigDstPort: 53},
		{Protocol: "udp", OrigDst: netip.MustParseAddr("198.19.0.1"), OrigDstPort: 30053},
	}
	got := f.ct.Deletes()
	slices.SortFunc(got, func(a, b conntrack.Filter) int { return a.OrigDst.Compare(b.OrigDst) })
	if !slices.Equal(got, wantFilters) {
		t.Errorf("default/dns deleted: deletes %v, want %v", got, wantFilters)
	}
	if n := len(f.ct.Stales()); n != 2 {
		t.Errorf("a Service left: %d table walks in all, want still 2 (its frontends go by filter)", n)
	}
	if st := f.p.Conntrack(); st != (ConntrackStats{Deleted: 5}) {
		t.Errorf("Conntrack() = %+v, want 5 deleted, no error", st)
	}
	var m dto.Metric // kube-proxy's conntrack_reconciler_sync_duration_seconds
	if err := f.p.conntrackDuration.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetHistogram().GetSampleCount(); n != 4 {
		t.Errorf("conntrack cleanup timed %d times, want 4 (one per sync)", n)
	}
}

// A UDP Service whose endpoints went to zero: after the sync that removed
// its last real server, no entry to its frontends is left; nor after a new
// process's first sync, which finds the entries an earlier one left
// (kubernetes#139629): every entry to a frontend without real servers goes,
// its node address's included (matched by address, not by port alone).
func TestSyncConntrackEndpointsToZero(t *testing.T) {
	toGone := flow("udp", "198.18.0.11:53", "198.19.1.4:8080")
	nodePortToGone := flow("udp", "198.19.0.1:30053", "198.19.1.4:8080")
	tcp := flow("tcp", "198.18.0.11:53", "198.19.1.4:8080")
	otherNode := flow("udp", "198.19.0.99:30053", "198.19.1.4:8080")

	t.Run("sync", func(t *testing.T) {
		f := newFixture(t)
		f.sync(t, dnsService("198.19.1.4"))
		f.ct.Add(toGone, nodePortToGone, tcp, otherNode)
		f.sync(t, dnsService())
		if got, want := f.ct.Flows(), []conntrack.Flow{tcp, otherNode}; !slices.Equal(got, want) {
			t.Errorf("flows %v, want %v", got, want)
		}
	})
	t.Run("first sync", func(t *testing.T) {
		f := newFixture(t)
		f.ct.Add(toGone, nodePortToGone, tcp, otherNode)
		f.sync(t, dnsService())
		if got, want := f.ct.Flows(), []conntrack.Flow{tcp, otherNode}; !slices.Equal(got, want) {
			t.Errorf("flows %v, want %v (the entries of frontends without real servers stayed)", got, want)
		}
		if st := f.p.Conntrack(); st != (ConntrackStats{Deleted: 2}) {
			t.Errorf("Conntrack() = %+v, want 2 deleted, no error", st)
		}
	})
}

// failingWalk is a conntrack table whose next DeleteStale fails.
type failingWalk struct {
	*conntrack.Fake
	fail bool
}

func (f *failingWalk) DeleteStale(ctx context.Context, s conntrack.Stale) (int, error) {
	if f.fail {
		f.fail = false
		return 0, errors.New("conntrack: netlink: no buffer space available")
	}
	return f.Fake.DeleteStale(ctx, s)
}

// A failed cleanup does not fail the sync: it is counted, and the next sync
// walks the table again although the selection did not change.
func TestSyncConntrackFailure(t *testing.T) {
	f := newFixture(t)
	f.p.cfg.Conntrack = &failingWalk{Fake: f.ct, fail: true}
	redirected := flow("udp", "198.18.0.10:53", "198.19.0.1:40000")
	f.ct.Add(redirected)
	f.sync(t, web([]string{"198.19.1.2"}, withUDP)) // fails the test if Sync returns an error
	st := f.p.Conntrack()
	if st.Errors != 1 || !strings.Contains(st.LastError, "no buffer space") || len(f.ct.Flows()) != 1 {
		t.Fatalf("after a failed walk: %+v, flows %v; want one error named, the flow left", st, f.ct.Flows())
	}
	f.sync(t, web([]string{"198.19.1.2"}, withUDP))
	if st := f.p.Conntrack(); st != (ConntrackStats{Deleted: 1, Errors: 1}) || len(f.ct.Flows()) != 0 {
		t.Errorf("the next sync: %+v, flows %v; want the flow deleted and the error cleared", st, f.ct.Flows())
	}
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}
