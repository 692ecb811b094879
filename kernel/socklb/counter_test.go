package socklb

import (
	"context"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// TestFakeConnections: the Fake counts what Connect and SendMsg translate,
// per Service; a connect to a Service without endpoints, or to an address
// that is no Service, counts nothing; DeleteService forgets the count, so
// the Service added again starts from zero.
func TestFakeConnections(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	web := Service{VIP: netip.MustParseAddr("198.18.0.10"), Port: 80, Protocol: TCP}
	dns := Service{VIP: netip.MustParseAddr("2001:db8:18::53"), Port: 53, Protocol: UDP}
	empty := Service{VIP: netip.MustParseAddr("198.18.0.11"), Port: 80, Protocol: TCP}
	must(t, f.SetService(ctx, web, Entry{Backends: []netip.AddrPort{netip.MustParseAddrPort("198.19.0.1:8080")}}))
	must(t, f.SetService(ctx, dns, Entry{Backends: []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:19::1]:53")}}))
	must(t, f.SetService(ctx, empty, Entry{}))
	for i := range 3 {
		f.Connect(Client{SocketCookie: uint64(i)}, TCP, netip.MustParseAddrPort("198.18.0.10:80"))
	}
	f.SendMsg(Client{SocketCookie: 9}, netip.MustParseAddrPort("[2001:db8:18::53]:53"))
	f.Connect(Client{}, TCP, netip.MustParseAddrPort("198.18.0.11:80")) // no endpoint
	f.Connect(Client{}, TCP, netip.MustParseAddrPort("198.18.0.12:80")) // no Service
	got, err := f.Connections(ctx)
	must(t, err)
	want := map[Service]uint64{web: 3, dns: 1, empty: 0}
	if len(got) != len(want) || got[web] != 3 || got[dns] != 1 || got[empty] != 0 {
		t.Errorf("Connections() = %v, want %v", got, want)
	}
	must(t, f.DeleteService(ctx, web))
	must(t, f.SetService(ctx, web, Entry{Backends: []netip.AddrPort{netip.MustParseAddrPort("198.19.0.1:8080")}}))
	if got, _ := f.Connections(ctx); got[web] != 0 {
		t.Errorf("after DeleteService and SetService, Connections()[%s] = %d, want 0", web, got[web])
	}
}

// TestKernelConnections: connect4/6 and sendmsg4/6 count their translations
// in the counts map, summed over the CPUs by Connections: 20 TCP connects
// from inside the cgroup count 20, a connect from outside it nothing, each
// of 5 unconnected UDP datagrams one. The counts survive a restart with
// pinned maps (the next Kernel adopts them, and goes on counting), and a
// Service deleted and added again starts from zero.
func TestKernelConnections(t *testing.T) {
	netnstest.RequireRoot(t)
	cg := newCgroup(t)
	cfg := Config{CgroupPath: cg.path, PinPath: newBPFFS(t)}
	var open []*Kernel
	t.Cleanup(func() {
		for _, k := range open {
			k.Close()
		}
		_ = Cleanup(cfg) // detach even when the test failed (before the cgroup goes)
	})
	newPinned := func() *Kernel {
		t.Helper()
		k, err := New(cfg)
		if err != nil {
			skipIfRefused(t, "socklb.New", err)
		}
		open = append(open, k)
		return k
	}
	ctx := context.Background()
	ns := netnstest.New(t)
	k := newPinned()

	web := Service{VIP: netip.MustParseAddr("2001:db8:18::10"), Port: 80, Protocol: TCP}
	dns := Service{VIP: netip.MustParseAddr("198.18.0.53"), Port: 53, Protocol: UDP}
	addAddr(t, ns, web.VIP)
	serve(t, ns, "[2001:db8:18::10]:80", "vip")
	for _, a := range []string{"2001:db8:19::1", "198.19.0.1"} {
		addAddr(t, ns, netip.MustParseAddr(a))
	}
	serve(t, ns, "[2001:db8:19::1]:8080", "web")
	serveUDP(t, ns, "198.19.0.1:53", "dns")
	must(t, k.SetService(ctx, web, Entry{Backends: []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:19::1]:8080")}}))
	must(t, k.SetService(ctx, dns, Entry{Backends: []netip.AddrPort{netip.MustParseAddrPort("198.19.0.1:53")}}))
	check := func(when string, want map[Service]uint64) {
		t.Helper()
		got, err := k.Connections(ctx)
		must(t, err)
		if len(got) != len(want) || got[web] != want[web] || got[dns] != want[dns] {
			t.Errorf("%s: Connections() = %v, want %v", when, got, want)
		}
	}
	check("before any connect", map[Service]uint64{web: 0, dns: 0})

	if got := countLines(dialFrom(t, ns, cg, "[2001:db8:18::10]:80", 20)); got["web"] != 20 {
		t.Fatalf("20 connects from the cgroup reached %v, want web 20 times", got)
	}
	if got := dialFrom(t, ns, nil, "[2001:db8:18::10]:80", 1); got != "vip" {
		t.Fatalf("outside the cgroup, the connect reached %q, want the VIP's own listener", got)
	}
	for range 5 {
		clientFrom(t, ns, cg, "udp-unconnected", "198.18.0.53:53", 1)
	}
	check("after 20 connects and 5 datagrams from the cgroup", map[Service]uint64{web: 20, dns: 5})

	// A restart: the next Kernel adopts the pinned counts and adds to them.
	must(t, k.Close())
	open = open[:0]
	k = newPinned()
	check("adopted after a restart", map[Service]uint64{web: 20, dns: 5})
	dialFrom(t, ns, cg, "[2001:db8:18::10]:80", 2)
	check("after 2 more connects", map[Service]uint64{web: 22, dns: 5})

	// Deleted and added again: a fresh counter, whatever ID it gets.
	must(t, k.DeleteService(ctx, web))
	must(t, k.SetService(ctx, web, Entry{Backends: []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:19::1]:8080")}}))
	check("web deleted and added again", map[Service]uint64{web: 0, dns: 5})
}
