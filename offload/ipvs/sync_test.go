package ipvs

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/kernel/link"
	"github.com/svcproxy/svcproxy/service"
)

type fixture struct {
	ipvs  *kipvs.Fake
	links *link.Fake
	ct    *conntrack.Fake
	now   time.Time
	p     *Dataplane
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{ipvs: kipvs.NewFake(), links: link.NewFake(), ct: conntrack.NewFake(), now: time.Unix(1000, 0)}
	p, err := New(Config{
		IPVS: f.ipvs, Links: f.links, Conntrack: f.ct, Node: dataplane.Node{NodeName: "node-a", NodePortIPs: []netip.Addr{netip.MustParseAddr("198.19.0.1")}},
		Now: func() time.Time { return f.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

func (f *fixture) sync(t *testing.T, svcs ...*service.Service) {
	t.Helper()
	if err := f.p.Sync(context.Background(), service.NewSnapshot(svcs, nil)); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// want compares the Fake's ipvsadm-like dump, without its two header lines.
func (f *fixture) want(t *testing.T, want string) {
	t.Helper()
	got := f.ipvs.Dump()
	got = got[strings.Index(got, "InActConn\n")+len("InActConn\n"):]
	if got != dedent(want) {
		t.Errorf("ipvs:\n%s\nwant:\n%s", got, dedent(want))
	}
}

func dedent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		b.WriteString(strings.TrimLeft(l, "\t") + "\n")
	}
	return b.String()
}

type svcOpt func(*service.Service)

// web is default/web, ClusterIP 198.18.0.10, port http 80/TCP -> 8080 on the given
// endpoint IPs.
func web(eps []string, opts ...svcOpt) *service.Service {
	svc := &service.Service{
		NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"},
		Type:           service.TypeClusterIP,
		ClusterIPs:     []netip.Addr{netip.MustParseAddr("198.18.0.10")},
		Annotations:    map[string]string{},
	}
	p := &service.Port{
		Name:    service.PortName{NamespacedName: svc.NamespacedName, Port: "http", Protocol: service.TCP},
		Service: svc, Port: 80, Protocol: service.TCP,
	}
	for _, ep := range eps {
		p.Endpoints = append(p.Endpoints, service.Endpoint{
			Addr: netip.AddrPortFrom(netip.MustParseAddr(ep), 8080), Ready: true, Serving: true, NodeName: "node-a",
		})
	}
	svc.Ports = []*service.Port{p}
	for _, o := range opts {
		o(svc)
	}
	return svc
}

func withUDP(s *service.Service) {
	p := *s.Ports[0]
	p.Name.Port, p.Name.Protocol, p.Protocol, p.Port = "dns", service.UDP, service.UDP, 53
	s.Ports = append(s.Ports, &p)
}

func TestSyncCreate(t *testing.T) {
	f := newFixture(t)
	svc := web([]string{"198.19.1.2", "198.19.1.3"}, func(s *service.Service) {
		s.Type = service.TypeNodePort
		s.Ports[0].NodePort = 30080
		s.ExternalIPs = []netip.Addr{netip.MustParseAddr("198.18.1.1")}
		s.Affinity = service.Affinity{ClientIP: true, Timeout: 600 * time.Second}
	})
	f.sync(t, svc)
	f.want(t, `
		TCP  198.18.0.10:80 rr persistent 600
		  -> 198.19.1.2:8080              Masq    1      0          0
		  -> 198.19.1.3:8080              Masq    1      0          0
		TCP  198.18.1.1:80 rr persistent 600
		  -> 198.19.1.2:8080              Masq    1      0          0
		  -> 198.19.1.3:8080              Masq    1      0          0
		TCP  198.19.0.1:30080 rr persistent 600
		  -> 198.19.1.2:8080              Masq    1      0          0
		  -> 198.19.1.3:8080              Masq    1      0          0`)
	if got, want := f.links.Dump(), "svcp-ipvs0 dummy up 198.18.0.10/32 198.18.1.1/32\n"; got != want {
		t.Errorf("links = %q, want %q", got, want)
	}
	writes := f.ipvs.Writes()
	f.sync(t, svc)
	if n := f.ipvs.Writes() - writes; n != 0 {
		t.Errorf("second Sync of the same Snapshot made %d writes, want 0", n)
	}
}

func TestSyncChanges(t *testing.T) {
	tests := []struct {
		name string
		svc  *service.Service
		want string
	}{
		{"scheduler annotation", web([]string{"198.19.1.2"}, func(s *service.Service) {
			s.Annotations[SchedulerAnnotation] = "sh"
		}), `
			TCP  198.18.0.10:80 sh
			  -> 198.19.1.2:8080              Masq    1      0          0`},
		{"weights annotation", web([]string{"198.19.1.2", "198.19.1.3"}, func(s *service.Service) {
			s.Annotations[SchedulerAnnotation] = "wrr"
			s.Annotations[WeightsAnnotation] = "198.19.1.3=3"
		}), `
			TCP  198.18.0.10:80 wrr
			  -> 198.19.1.2:8080              Masq    1      0          0
			  -> 198.19.1.3:8080              Masq    3      0          0`},
		{"affinity added", web([]string{"198.19.1.2"}, func(s *service.Service) {
			s.Affinity = service.Affinity{ClientIP: true}
		}), `
			TCP  198.18.0.10:80 rr persistent 10800
			  -> 198.19.1.2:8080              Masq    1      0          0`},
		{"endpoint added", web([]string{"198.19.1.2", "198.19.1.9"}), `
			TCP  198.18.0.10:80 rr
			  -> 198.19.1.2:8080              Masq    1      0          0
			  -> 198.19.1.9:8080              Masq    1      0          0`},
		{"local policy keeps this node's endpoints", web([]string{"198.19.1.2"}, func(s *service.Service) {
			s.InternalPolicyLocal = true
			ep := s.Ports[0].Endpoints[0]
			ep.Addr, ep.NodeName = netip.MustParseAddrPort("198.19.2.2:8080"), "node-b"
			s.Ports[0].Endpoints = append(s.Ports[0].Endpoints, ep)
		}), `
			TCP  198.18.0.10:80 rr
			  -> 198.19.1.2:8080              Masq    1      0          0`},
		// Another node's ready endpoint does not hide this node's terminating
		// one: with policy Local the choice is made per node (kube-proxy's
		// CategorizeEndpoints), so the node keeps serving during a rollout.
		{"local policy falls back to this node's terminating endpoint", web([]string{"198.19.1.2"}, func(s *service.Service) {
			s.InternalPolicyLocal = true
			mine := &s.Ports[0].Endpoints[0]
			mine.Ready, mine.Terminating = false, true
			other := *mine
			other.Addr, other.NodeName, other.Ready, other.Terminating = netip.MustParseAddrPort("198.19.2.2:8080"), "node-b", true, false
			s.Ports[0].Endpoints = append(s.Ports[0].Endpoints, other)
		}), `
			TCP  198.18.0.10:80 rr
			  -> 198.19.1.2:8080              Masq    1      0          0`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.sync(t, web([]string{"198.19.1.2"}))
			f.sync(t, tc.svc)
			f.want(t, tc.want)
		})
	}
}

func TestSyncBadAnnotation(t *testing.T) {
	f := newFixture(t)
	svc := web([]string{"198.19.1.2"}, func(s *service.Service) { s.Annotations[SchedulerAnnotation] = "fastest" })
	err := f.p.Sync(context.Background(), service.NewSnapshot([]*service.Service{svc}, nil))
	if err == nil || !strings.Contains(err.Error(), `service default/web: annotation svcproxy.io/ipvs-scheduler "fastest"`) {
		t.Errorf("Sync error = %v, want it to name the service and annotation", err)
	}
	f.want(t, `
		TCP  198.18.0.10:80 rr
		  -> 198.19.1.2:8080              Masq    1      0          0`)
}

func TestSyncGracefulTermination(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tcp := kipvs.Key{Protocol: kipvs.TCP, Addr: netip.MustParseAddrPort("198.18.0.10:80")}
	gone := netip.MustParseAddrPort("198.19.1.3:8080")
	f.sync(t, web([]string{"198.19.1.2", "198.19.1.3"}, withUDP))
	if err := f.ipvs.SetConns(tcp, gone, 1, 0); err != nil {
		t.Fatal(err)
	}

	f.sync(t, web([]string{"198.19.1.2"}, withUDP))
	f.want(t, `
		TCP  198.18.0.10:80 rr
		  -> 198.19.1.2:8080              Masq    1      0          0
		  -> 198.19.1.3:8080              Masq    0      1          0
		UDP  198.18.0.10:53 rr
		  -> 198.19.1.2:8080              Masq    1      0          0`)
	if n := f.p.Draining(); n != 1 {
		t.Errorf("Draining() = %d, want 1", n)
	}

	f.now = f.now.Add(DefaultGracePeriod - time.Second)
	f.sync(t, web([]string{"198.19.1.2"}, withUDP))
	if rss, _ := f.ipvs.RealServers(ctx, tcp); len(rss) != 2 {
		t.Fatalf("within the grace period with a connection: %d real servers, want 2 (one draining)", len(rss))
	}

	// Back before the drain ends: weight 1 again, no longer draining.
	f.sync(t, web([]string{"198.19.1.2", "198.19.1.3"}, withUDP))
	if n := f.p.Draining(); n != 0 {
		t.Errorf("after the endpoint came back: Draining() = %d, want 0", n)
	}
	f.sync(t, web([]string{"198.19.1.2"}, withUDP))

	for _, step := range []struct {
		name           string
		conns          [2]int
		advance        time.Duration
		wantRealServer bool
	}{
		{"active connection", [2]int{1, 0}, time.Minute, true},
		{"closing connection", [2]int{0, 1}, time.Minute, true},
		{"grace period over", [2]int{0, 1}, DefaultGracePeriod, false},
	} {
		if err := f.ipvs.SetConns(tcp, gone, step.conns[0], step.conns[1]); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		f.now = f.now.Add(step.advance)
		f.sync(t, web([]string{"198.19.1.2"}, withUDP))
		rss, _ := f.ipvs.RealServers(ctx, tcp)
		if got := len(rss) == 2; got != step.wantRealServer {
			t.Errorf("%s: draining real server present = %v, want %v", step.name, got, step.wantRealServer)
		}
	}
	if n := f.p.Draining(); n != 0 {
		t.Errorf("Draining() = %d, want 0", n)
	}
}

func TestSyncDeletesIdleAtOnce(t *testing.T) {
	f := newFixture(t)
	f.sync(t, web([]string{"198.19.1.2", "198.19.1.3"}))
	f.sync(t, web([]string{"198.19.1.2"}))
	f.want(t, `
		TCP  198.18.0.10:80 rr
		  -> 198.19.1.2:8080              Masq    1      0          0`)
}

// leftovers fills the Fake as a crashed earlier run and a neighbour would have.
func leftovers(t *testing.T, f *fixture) (foreign kipvs.Key) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.links.EnsureDummy(ctx, DefaultInterface))
	must(f.links.AddAddress(ctx, DefaultInterface, netip.MustParsePrefix("198.18.0.99/32")))
	must(f.links.AddAddress(ctx, DefaultInterface, netip.MustParsePrefix("fe80::1/64")))
	for _, k := range []kipvs.Key{
		{Protocol: kipvs.TCP, Addr: netip.MustParseAddrPort("198.18.0.99:80")},   // old ClusterIP
		{Protocol: kipvs.UDP, Addr: netip.MustParseAddrPort("198.19.0.1:31000")}, // old NodePort
		{Protocol: kipvs.TCP, Addr: netip.MustParseAddrPort("198.19.0.1:22")},    // not ours: out of range
		{Protocol: kipvs.TCP, Addr: netip.MustParseAddrPort("198.19.9.9:80")},    // not ours
	} {
		must(f.ipvs.AddVirtualServer(ctx, kipvs.VirtualServer{Key: k, Scheduler: "wlc"}))
	}
	return kipvs.Key{Protocol: kipvs.TCP, Addr: netip.MustParseAddrPort("198.19.9.9:80")}
}

func TestSyncRemovesOurLeftovers(t *testing.T) {
	f := newFixture(t)
	leftovers(t, f)
	f.sync(t, web([]string{"198.19.1.2"}))
	f.want(t, `
		TCP  198.18.0.10:80 rr
		  -> 198.19.1.2:8080              Masq    1      0          0
		TCP  198.19.0.1:22 wlc
		TCP  198.19.9.9:80 wlc`)
	if got, want := f.links.Dump(), "svcp-ipvs0 dummy up 198.18.0.10/32 fe80::1/64\n"; got != want {
		t.Errorf("links = %q, want %q", got, want)
	}
}

func TestCleanup(t *testing.T) {
	f := newFixture(t)
	leftovers(t, f)
	f.sync(t, web([]string{"198.19.1.2"}))
	if err := f.p.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.want(t, `
		TCP  198.19.0.1:22 wlc
		TCP  198.19.9.9:80 wlc`)
	if got := f.links.Dump(); got != "" {
		t.Errorf("links after Cleanup = %q, want none", got)
	}
	if err := f.p.Cleanup(context.Background()); err != nil {
		t.Errorf("second Cleanup: %v", err)
	}
}

func TestNewConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no kernel", Config{}, "IPVS and Links are required"},
		{"bad scheduler", Config{IPVS: kipvs.NewFake(), Links: link.NewFake(), Scheduler: "lblcr"}, `scheduler "lblcr"`},
		{"bad range", Config{IPVS: kipvs.NewFake(), Links: link.NewFake(), NodePortRange: [2]uint16{2, 1}}, "node port range 2-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// Connections sums a port's virtual servers: its ClusterIP, external IP and
// NodePort on each node address.
func TestConnections(t *testing.T) {
	f := newFixture(t)
	svc := web([]string{"198.19.1.2"}, func(s *service.Service) {
		s.Type = service.TypeNodePort
		s.Ports[0].NodePort = 30080
		s.ExternalIPs = []netip.Addr{netip.MustParseAddr("198.18.1.1")}
	}, withUDP)
	f.sync(t, svc)
	for key, n := range map[string]uint32{"198.18.0.10:80": 5, "198.18.1.1:80": 2, "198.19.0.1:30080": 1, "198.18.0.10:53": 7} {
		proto := kipvs.TCP
		if strings.HasSuffix(key, ":53") {
			proto = kipvs.UDP
		}
		k := kipvs.Key{Protocol: proto, Addr: netip.MustParseAddrPort(key)}
		if err := f.ipvs.SetStats(k, kipvs.Stats{Connections: n}); err != nil {
			t.Fatal(err)
		}
	}
	http, dns := svc.Ports[0].Name, svc.Ports[1].Name
	got, err := f.p.Connections(context.Background(), service.NewSnapshot([]*service.Service{svc}, nil), dataplane.PortSet{http: true, dns: true})
	if err != nil {
		t.Fatal(err)
	}
	if got[http] != 8 || got[dns] != 7 {
		t.Errorf("Connections = %v, want %s=8 %s=7", got, http, dns)
	}
}

// A virtual server that is no longer wanted (its
// Service deleted, or hybrid mode demoted its port) drains: its real servers
// get weight 0, and it and its address stay until the last connection ends
// (or the grace period passes). Deleting it at once would drop its
// connections (expire_nodest_conn=1).
func TestSyncRetiresDraining(t *testing.T) {
	for _, tt := range []struct {
		name  string
		after func(f *fixture) *service.Snapshot
	}{
		{"service deleted", func(f *fixture) *service.Snapshot { return service.NewSnapshot(nil, nil) }},
		{"port deselected (hybrid demotion)", func(f *fixture) *service.Snapshot {
			f.p.cfg.Carries = func(service.PortName) bool { return false }
			return service.NewSnapshot([]*service.Service{web([]string{"198.19.1.2", "198.19.1.3"})}, nil)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			tcp := kipvs.Key{Protocol: kipvs.TCP, Addr: netip.MustParseAddrPort("198.18.0.10:80")}
			busy := netip.MustParseAddrPort("198.19.1.2:8080")
			f.sync(t, web([]string{"198.19.1.2", "198.19.1.3"}))
			if err := f.ipvs.SetConns(tcp, busy, 1, 0); err != nil {
				t.Fatal(err)
			}
			snap := tt.after(f)
			if err := f.p.Sync(ctx, snap); err != nil {
				t.Fatal(err)
			}
			f.want(t, `
				TCP  198.18.0.10:80 rr
				  -> 198.19.1.2:8080              Masq    0      1          0`)
			if got, want := f.links.Dump(), "svcp-ipvs0 dummy up 198.18.0.10/32\n"; got != want {
				t.Errorf("links while draining = %q, want %q", got, want)
			}
			if err := f.ipvs.SetConns(tcp, busy, 0, 0); err != nil { // the connection ends
				t.Fatal(err)
			}
			if err := f.p.Sync(ctx, snap); err != nil {
				t.Fatal(err)
			}
			if vss, _ := f.ipvs.VirtualServers(ctx); len(vss) != 0 {
				t.Errorf("after the drain: virtual servers %v, want none", vss)
			}
			if got := f.links.Dump(); got != "svcp-ipvs0 dummy up\n" {
				t.Errorf("links after the drain = %q, want no address", got)
			}
			if n := f.p.Draining(); n != 0 {
				t.Errorf("Draining() = %d, want 0", n)
			}
		})
	}
}
