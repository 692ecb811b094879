package socklb

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	ap = netip.MustParseAddrPort
	ip = netip.MustParseAddr
)

// fakeWithServices is the Fake the connect tables run against: a TCP Service
// with three backends, a UDP one with one, an IPv6 one with two, and one
// without endpoints.
func fakeWithServices(t *testing.T) *Fake {
	t.Helper()
	ctx := context.Background()
	f := NewFake()
	must(t, f.SetService(ctx, Service{ip("198.18.0.10"), 80, TCP}, Entry{Backends: []netip.AddrPort{
		ap("198.19.1.1:8080"), ap("198.19.1.2:8080"), ap("198.19.1.3:8080")}}))
	must(t, f.SetService(ctx, Service{ip("198.18.0.53"), 53, UDP}, Entry{Backends: []netip.AddrPort{ap("198.19.1.9:5353")}}))
	must(t, f.SetService(ctx, Service{ip("2001:db8:18::10"), 80, TCP}, Entry{Backends: []netip.AddrPort{
		ap("[2001:db8:19::1]:8080"), ap("[2001:db8:19::2]:8080")}}))
	must(t, f.SetService(ctx, Service{ip("198.18.0.20"), 80, TCP}, Entry{}))
	return f
}

// TestFakeConnect walks connect() calls through the Fake's maps, as
// connect4 and connect6 decide them.
func TestFakeConnect(t *testing.T) {
	f := fakeWithServices(t)
	tests := []struct {
		name   string
		proto  Protocol
		dst    string
		random uint32
		hook   string
		want   string
	}{
		{"slot 0", TCP, "198.18.0.10:80", 0, "connect4", "198.19.1.1:8080"},
		{"slot 2", TCP, "198.18.0.10:80", 2, "connect4", "198.19.1.3:8080"},
		{"random 7 % 3 is slot 1", TCP, "198.18.0.10:80", 7, "connect4", "198.19.1.2:8080"},
		{"UDP service", UDP, "198.18.0.53:53", 5, "connect4", "198.19.1.9:5353"},
		{"same VIP, other protocol: untouched", UDP, "198.18.0.10:80", 0, "connect4", "198.18.0.10:80"},
		{"same VIP, other port: untouched", TCP, "198.18.0.10:443", 0, "connect4", "198.18.0.10:443"},
		{"not a service: untouched", TCP, "198.19.1.2:8080", 0, "connect4", "198.19.1.2:8080"},
		{"no endpoints: untouched, nftables rejects", TCP, "198.18.0.20:80", 0, "connect4", "198.18.0.20:80"},
		{"IPv6 service", TCP, "[2001:db8:18::10]:80", 1, "connect6", "[2001:db8:19::2]:8080"},
		{"IPv4-mapped on an IPv6 socket: the IPv4 service, mapped", TCP, "[::ffff:198.18.0.10]:80", 1, "connect6", "[::ffff:198.19.1.2]:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, tr := f.Connect(Client{Random: tt.random}, tt.proto, ap(tt.dst))
			if got.String() != tt.want || tr.Result != got || tr.Hook != tt.hook {
				t.Errorf("connect(%s %s) reaches %s through %s, want %s through %s\n%s", tt.proto, tt.dst, got, tr.Hook, tt.want, tt.hook, tr)
			}
		})
	}
}

func TestFakeConnectTrace(t *testing.T) {
	_, tr := fakeWithServices(t).Connect(Client{NetnsCookie: 4096, SocketCookie: 77, Random: 4}, TCP, ap("198.18.0.10:80"))
	want := `connect4 TCP 198.18.0.10:80, netns cookie 4096, socket cookie 77
  services  lookup 198.18.0.10:80/TCP  => id 1, 3 backends
  backends  lookup (id 1, slot 1)  => 198.19.1.2:8080 (random 4 % 3)
  revnat    update (socket 77, 198.19.1.2:8080)  => = 198.18.0.10:80
  ctx       user_ip, user_port  => = 198.19.1.2:8080
result: rewritten to 198.19.1.2:8080
`
	if got := tr.String(); got != want {
		t.Errorf("trace:\n%s\nwant:\n%s", got, want)
	}
}

// TestFakeUDP walks UDP exchanges through the Fake: a datagram out through
// sendmsg (unconnected) or connect (connected), and the reply's source
// through recvmsg, as the kernel's hooks decide them.
func TestFakeUDP(t *testing.T) {
	f := fakeWithServices(t)
	dns := ap("198.18.0.53:53")
	// An unconnected socket (cookie 7) sends to the Service: sendmsg4.
	to, tr := f.SendMsg(Client{SocketCookie: 7}, dns)
	if to != ap("198.19.1.9:5353") || tr.Hook != "sendmsg4" {
		t.Fatalf("sendto(%s) goes to %s through %s, want 198.19.1.9:5353 through sendmsg4\n%s", dns, to, tr.Hook, tr)
	}
	// A connected socket (cookie 8) of a dual-stack client: connect6 with
	// the Service's IPv4-mapped address.
	f.Connect(Client{SocketCookie: 8}, UDP, ap("[::ffff:198.18.0.53]:53"))
	tests := []struct {
		name   string
		cookie uint64
		src    string
		hook   string
		want   string
	}{
		{"the reply to socket 7: from the Service", 7, "198.19.1.9:5353", "recvmsg4", "198.18.0.53:53"},
		{"the reply to socket 8, mapped: from the Service, mapped", 8, "[::ffff:198.19.1.9]:5353", "recvmsg6", "[::ffff:198.18.0.53]:53"},
		{"socket 9 never sent to the Service: untouched", 9, "198.19.1.9:5353", "recvmsg4", "198.19.1.9:5353"},
		{"socket 7, another backend port: untouched", 7, "198.19.1.9:53", "recvmsg4", "198.19.1.9:53"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, tr := f.RecvMsg(Client{SocketCookie: tt.cookie}, ap(tt.src))
			if got.String() != tt.want || tr.Hook != tt.hook {
				t.Errorf("recvfrom() on socket %d of a datagram from %s reports %s through %s, want %s through %s\n%s", tt.cookie, tt.src, got, tr.Hook, tt.want, tt.hook, tr)
			}
		})
	}
	_, tr = f.RecvMsg(Client{SocketCookie: 7}, ap("198.19.1.9:5353"))
	want := `recvmsg4 UDP 198.19.1.9:5353, netns cookie 0, socket cookie 7
  revnat  lookup (socket 7, 198.19.1.9:5353)  => 198.18.0.53:53
  ctx     user_ip, user_port  => = 198.18.0.53:53
result: rewritten to 198.18.0.53:53
`
	if got := tr.String(); got != want {
		t.Errorf("trace:\n%s\nwant:\n%s", got, want)
	}
}

// TestFakeGetPeerName: a socket connected through a Service hears the
// Service as its peer (getpeername4/6); another socket connected to the same
// backend directly hears the backend.
func TestFakeGetPeerName(t *testing.T) {
	f := fakeWithServices(t)
	f.Connect(Client{SocketCookie: 5, Random: 2}, TCP, ap("198.18.0.10:80"))
	f.Connect(Client{SocketCookie: 6, Random: 1}, TCP, ap("[2001:db8:18::10]:80"))
	f.Connect(Client{SocketCookie: 7}, TCP, ap("198.19.1.3:8080")) // not a Service
	tests := []struct {
		name   string
		cookie uint64
		peer   string
		hook   string
		want   string
	}{
		{"through the IPv4 Service", 5, "198.19.1.3:8080", "getpeername4", "198.18.0.10:80"},
		{"through the IPv6 Service", 6, "[2001:db8:19::2]:8080", "getpeername6", "[2001:db8:18::10]:80"},
		{"to the backend directly", 7, "198.19.1.3:8080", "getpeername4", "198.19.1.3:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, tr := f.GetPeerName(Client{SocketCookie: tt.cookie}, TCP, ap(tt.peer))
			if got.String() != tt.want || tr.Hook != tt.hook {
				t.Errorf("getpeername() on socket %d connected to %s reports %s through %s, want %s through %s\n%s", tt.cookie, tt.peer, got, tr.Hook, tt.want, tt.hook, tr)
			}
		})
	}
}

// TestFakeAffinity walks ClientIP affinity through the Fake: the first
// connect from a namespace picks at random and is remembered; later ones
// take the same backend while it was used less than the timeout ago,
// whatever the random number; an expired entry, another namespace, or a
// slot that holds another backend since, picks again.
func TestFakeAffinity(t *testing.T) {
	ctx := context.Background()
	f := fakeWithServices(t)
	web := Service{ip("198.18.0.10"), 80, TCP}
	three := []netip.AddrPort{ap("198.19.1.1:8080"), ap("198.19.1.2:8080"), ap("198.19.1.3:8080")}
	must(t, f.SetService(ctx, web, Entry{Backends: three, AffinityTimeout: 10 * time.Second}))
	connect := func(netns uint64, random uint32, now time.Duration) netip.AddrPort {
		got, _ := f.Connect(Client{NetnsCookie: netns, Random: random, Now: now}, TCP, ap("198.18.0.10:80"))
		return got
	}
	steps := []struct {
		name   string
		netns  uint64
		random uint32
		now    time.Duration
		want   string
	}{
		{"pod 1, first connect: random slot 1", 1, 1, 0, "198.19.1.2:8080"},
		{"pod 1, 9s later: the same", 1, 2, 9 * time.Second, "198.19.1.2:8080"},
		{"pod 1, 9s after that: the same (each use refreshes)", 1, 0, 18 * time.Second, "198.19.1.2:8080"},
		{"pod 2: its own, random slot 2", 2, 2, 18 * time.Second, "198.19.1.3:8080"},
		{"pod 1, 10s after its last use: expired, random slot 0", 1, 0, 28 * time.Second, "198.19.1.1:8080"},
		{"pod 1, 1s later: the new one", 1, 2, 29 * time.Second, "198.19.1.1:8080"},
	}
	for _, s := range steps {
		if got := connect(s.netns, s.random, s.now); got.String() != s.want {
			t.Errorf("%s: connect reaches %s, want %s", s.name, got, s.want)
		}
	}
	// Slot 0 now holds another backend: pod 1 picks again (random 1 % 3).
	must(t, f.SetService(ctx, web, Entry{Backends: []netip.AddrPort{ap("198.19.1.4:8080"), three[1], three[2]}, AffinityTimeout: 10 * time.Second}))
	got, tr := f.Connect(Client{NetnsCookie: 1, Random: 1, Now: 30 * time.Second}, TCP, ap("198.18.0.10:80"))
	want := `connect4 TCP 198.18.0.10:80, netns cookie 1, socket cookie 0
  services  lookup 198.18.0.10:80/TCP  => id 1, 3 backends
  affinity  lookup (netns 1, id 1)  => slot 0, 198.19.1.1:8080, used at 29s: fresh (timeout 10s)
  backends  lookup (id 1, slot 0)  => 198.19.1.4:8080: another backend since, pick again
  backends  lookup (id 1, slot 1)  => 198.19.1.2:8080 (random 1 % 3)
  affinity  update (netns 1, id 1)  => = slot 1, 198.19.1.2:8080, used at 30s
  revnat    update (socket 0, 198.19.1.2:8080)  => = 198.18.0.10:80
  ctx       user_ip, user_port  => = 198.19.1.2:8080
result: rewritten to 198.19.1.2:8080
`
	if got != ap("198.19.1.2:8080") || tr.String() != want {
		t.Errorf("after slot 0 changed, connect reaches %s, trace:\n%s\nwant:\n%s", got, tr, want)
	}
}

// TestFakeDumpLoad: a Fake's maps decoded, and a second Fake loaded with
// them answering as the first (what svclab trace does with a Kernel's Dump).
func TestFakeDumpLoad(t *testing.T) {
	ctx := context.Background()
	f := fakeWithServices(t)
	must(t, f.SetService(ctx, Service{ip("198.18.0.30"), 80, TCP}, Entry{Backends: []netip.AddrPort{ap("198.19.1.4:8080"), ap("198.19.1.5:8080")}, AffinityTimeout: 3 * time.Hour}))
	f.Connect(Client{NetnsCookie: 4097, SocketCookie: 12, Random: 1, Now: 5 * time.Second}, TCP, ap("198.18.0.30:80"))
	f.SendMsg(Client{SocketCookie: 13}, ap("198.18.0.53:53"))
	d, err := f.Dump(ctx)
	must(t, err)
	want := `services: (VIP, port, protocol) -> id, affinity, backends by slot
  198.18.0.10:80/TCP           id 1    affinity none      [0] 198.19.1.1:8080  [1] 198.19.1.2:8080  [2] 198.19.1.3:8080
  198.18.0.20:80/TCP           id 4    affinity none      no endpoint: untouched
  198.18.0.30:80/TCP           id 5    affinity 3h0m0s    [0] 198.19.1.4:8080  [1] 198.19.1.5:8080
  198.18.0.53:53/UDP           id 2    affinity none      [0] 198.19.1.9:5353
  [2001:db8:18::10]:80/TCP     id 3    affinity none      [0] [2001:db8:19::1]:8080  [1] [2001:db8:19::2]:8080
affinity: (netns cookie, id) -> slot, backend, last used
  (4097, 5)  slot 1 198.19.1.5:8080, used at 5s
revnat: (socket cookie, backend) -> Service
  (12, 198.19.1.5:8080)  198.18.0.30:80
  (13, 198.19.1.9:5353)  198.18.0.53:53
`
	if got := d.String(); got != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, want)
	}
	g := NewFake()
	must(t, g.Load(d))
	if d2, err := g.Dump(ctx); err != nil || d2.String() != want {
		t.Errorf("a Fake loaded with the Dump dumps:\n%s%v\nwant:\n%s", d2, err, want)
	}
	// The loaded affinity entry decides, whatever the random number.
	if got, tr := g.Connect(Client{NetnsCookie: 4097, Random: 0, Now: time.Minute}, TCP, ap("198.18.0.30:80")); got != ap("198.19.1.5:8080") {
		t.Errorf("on the loaded Fake, netns 4097 reaches %s, want its affinity backend 198.19.1.5:8080\n%s", got, tr)
	}
	if got, _ := g.RecvMsg(Client{SocketCookie: 13}, ap("198.19.1.9:5353")); got != ap("198.18.0.53:53") {
		t.Errorf("on the loaded Fake, socket 13's reply comes from %s, want 198.18.0.53:53", got)
	}
	bad := Dump{Services: []DumpService{{Service: Service{ip("198.18.0.1"), 80, TCP}, ID: 1}, {Service: Service{ip("198.18.0.2"), 80, TCP}, ID: 1}}}
	if err := g.Load(bad); err == nil || !strings.Contains(err.Error(), "services[1]: service 198.18.0.2:80/TCP: id 1: also 198.18.0.1:80/TCP's") {
		t.Errorf("Load with a duplicate id = %v, want an error naming both", err)
	}
}

// TestFakeSetService: a replaced Service keeps its ID and takes the new
// backends; a deleted one is untranslated; Services reads it all back.
func TestFakeSetService(t *testing.T) {
	ctx := context.Background()
	f := fakeWithServices(t)
	web := Service{ip("198.18.0.10"), 80, TCP}
	e := Entry{Backends: []netip.AddrPort{ap("198.19.1.7:8080")}, AffinityTimeout: 3 * time.Hour}
	must(t, f.SetService(ctx, web, e))
	if got, tr := f.Connect(Client{Random: 2}, TCP, ap("198.18.0.10:80")); got != ap("198.19.1.7:8080") || !strings.Contains(tr.String(), "id 1, 1 backends") {
		t.Errorf("after the change, connect reaches %s, want 198.19.1.7:8080 with id 1 kept\n%s", got, tr)
	}
	svcs, err := f.Services(ctx)
	must(t, err)
	if got := svcs[web]; !slices.Equal(got.Backends, e.Backends) || got.AffinityTimeout != e.AffinityTimeout || len(svcs) != 4 {
		t.Errorf("Services() = %v, want 4 with %s: %v", svcs, web, e)
	}
	must(t, f.DeleteService(ctx, web))
	must(t, f.DeleteService(ctx, web)) // absent: not an error
	if got, _ := f.Connect(Client{}, TCP, ap("198.18.0.10:80")); got != ap("198.18.0.10:80") {
		t.Errorf("after delete, connect reaches %s, want the VIP itself", got)
	}
}

func TestValidate(t *testing.T) {
	vip := ip("198.18.0.10")
	one := []netip.AddrPort{ap("198.19.1.2:8080")}
	tests := []struct {
		name    string
		svc     Service
		e       Entry
		wantErr string
	}{
		{"no VIP", Service{Port: 80, Protocol: TCP}, Entry{Backends: one}, "not an IPv4 or IPv6 address"},
		{"IPv4-mapped VIP", Service{ip("::ffff:198.18.0.10"), 80, TCP}, Entry{Backends: one}, "not an IPv4 or IPv6 address"},
		{"port 0", Service{vip, 0, TCP}, Entry{Backends: one}, "port: must not be 0"},
		{"SCTP", Service{vip, 80, 132}, Entry{Backends: one}, "protocol 132"},
		{"IPv6 backend of an IPv4 VIP", Service{vip, 80, TCP}, Entry{Backends: []netip.AddrPort{ap("[2001:db8:19::2]:80")}}, "backends[0] [2001:db8:19::2]:80: not an address of the VIP's family"},
		{"IPv4 backend of an IPv6 VIP", Service{ip("2001:db8:18::1"), 80, TCP}, Entry{Backends: one}, "backends[0]"},
		{"backend port 0", Service{vip, 80, TCP}, Entry{Backends: []netip.AddrPort{ap("198.19.1.2:0")}}, "port must not be 0"},
		{"affinity not whole seconds", Service{vip, 80, TCP}, Entry{Backends: one, AffinityTimeout: 1500 * time.Millisecond}, "affinity timeout 1.5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewFake().SetService(context.Background(), tt.svc, tt.e)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("SetService(%s, %v) = %v, want an error containing %q", tt.svc, tt.e, err, tt.wantErr)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
