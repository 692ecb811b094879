package ipset

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

var (
	vip   = netip.MustParseAddr("198.18.0.10")
	cip   = Set{Name: "SVCP-TEST-IP", Type: HashIPPort, Family: Inet}
	loops = Set{Name: "SVCP-TEST-LOOP", Type: HashIPPortIP, Family: Inet}
)

// exercise runs the same steps on any Interface; do runs each call (in a namespace
// for Real).
func exercise(t *testing.T, s Interface, do func(func() error) error) {
	t.Helper()
	ctx := context.Background()
	restore := func(script []byte) error { return do(func() error { return s.Restore(ctx, script) }) }
	list := func() []Set {
		t.Helper()
		var sets []Set
		if err := do(func() (err error) { sets, err = s.List(ctx); return err }); err != nil {
			t.Fatal(err)
		}
		var ours []Set
		for _, x := range sets {
			if strings.HasPrefix(x.Name, "SVCP-TEST") {
				slices.Sort(x.Members)
				ours = append(ours, x)
			}
		}
		slices.SortFunc(ours, func(a, b Set) int { return strings.Compare(a.Name, b.Name) })
		return ours
	}
	one := cip
	one.Members = []string{IPPort(vip, "TCP", 80), IPPort(vip, "udp", 53)}
	loop := loops
	loop.Members = []string{IPPortIP(netip.MustParseAddr("198.19.1.2"), "tcp", 8080, netip.MustParseAddr("198.19.1.2"))}
	for range 2 { // idempotent
		if err := restore(ReplaceScript(one, loop)); err != nil {
			t.Fatal(err)
		}
	}
	got := list()
	if len(got) != 2 || got[0].Name != cip.Name || len(got[0].Members) != 2 || got[1].Members[0] != "198.19.1.2,tcp:8080,198.19.1.2" {
		t.Fatalf("List = %+v, want the two sets with their members", got)
	}
	one.Members = one.Members[:1]
	if err := restore(ReplaceScript(one)); err != nil {
		t.Fatal(err)
	}
	if got := list(); len(got[0].Members) != 1 || got[0].Members[0] != "198.18.0.10,tcp:80" {
		t.Errorf("after replace: %+v, want one member 198.18.0.10,tcp:80", got[0])
	}
	if err := restore([]byte("add SVCP-TEST-NONE 198.18.0.12,tcp:80\n")); err == nil {
		t.Error("add to a missing set: no error")
	}
	if err := restore(DestroyScript(cip.Name, loops.Name)); err != nil {
		t.Fatal(err)
	}
	if got := list(); len(got) != 0 {
		t.Errorf("after destroy: %+v, want no sets", got)
	}
}

func TestFake(t *testing.T) {
	f := NewFake()
	var mirrored []Set
	f.OnRestore = func(s []Set) { mirrored = s }
	exercise(t, f, func(fn func() error) error { return fn() })
	if f.Restores() == 0 || mirrored == nil {
		t.Errorf("Restores() = %d, OnRestore saw %v: want both", f.Restores(), mirrored)
	}
}

func TestFakeRefuses(t *testing.T) {
	tests := []struct{ name, script, want string }{
		{"bad type", "create A hash:mac\n", `type "hash:mac"`},
		{"long name", "create " + strings.Repeat("A", 32) + " hash:ip\n", "name"},
		{"twice without -exist", "create A hash:ip\ncreate A hash:ip\n", "already exists"},
		{"other type with -exist", "create A hash:ip\ncreate A hash:ip,port -exist\n", "already exists"},
		{"family mismatch", "create A hash:ip\nadd A 2001:db8::1\n", "not an inet address"},
		{"port without proto is tcp, bad proto", "create A hash:ip,port\nadd A 198.18.0.1,icmp:1\n", "want tcp|udp|sctp"},
		{"dimensions", "create A hash:ip,port\nadd A 198.18.0.1\n", "want 2 parts"},
		{"swap types", "create A hash:ip\ncreate B hash:ip,port\nswap A B\n", "differ"},
		{"destroy missing", "destroy A\n", "does not exist"},
		{"duplicate add", "create A hash:ip\nadd A 198.18.0.1\nadd A 198.18.0.1\n", "already in set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := NewFake().Restore(context.Background(), []byte(tc.script))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Restore error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestReplaceScript(t *testing.T) {
	s := cip
	s.Members = []string{"198.18.0.11,udp:53", "198.18.0.10,tcp:80"}
	want := `create SVCP-TEST-IP hash:ip,port family inet -exist
create SVCP-TEST-IP-tmp hash:ip,port family inet -exist
flush SVCP-TEST-IP-tmp
add SVCP-TEST-IP-tmp 198.18.0.10,tcp:80 -exist
add SVCP-TEST-IP-tmp 198.18.0.11,udp:53 -exist
swap SVCP-TEST-IP-tmp SVCP-TEST-IP
destroy SVCP-TEST-IP-tmp
`
	if got := string(ReplaceScript(s)); got != want {
		t.Errorf("ReplaceScript:\n%s\nwant:\n%s", got, want)
	}
}

func TestReal(t *testing.T) {
	netnstest.RequireRoot(t, "ipset")
	ns := netnstest.New(t)
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Do(func() error { _, err := r.List(context.Background()); return err }); err != nil {
		t.Skipf("needs IP sets in the kernel (ip_set): %v", err)
	}
	exercise(t, r, ns.Do)
}

// An inet6 set lists its members as ipset prints them, in Real and in the Fake
// alike (the IPv6 ip sets of IPVS mode's masquerade).
func TestIPv6Sets(t *testing.T) {
	ctx := context.Background()
	six := Set{Name: "SVCP-TEST-6", Type: HashIPPortIP, Family: Inet6, Members: []string{
		IPPortIP(netip.MustParseAddr("2001:db8:19::1:2"), "tcp", 8080, netip.MustParseAddr("2001:db8:19::1:2"))}}
	list := func(s Interface, do func(func() error) error) []Set {
		t.Helper()
		var sets []Set
		if err := do(func() error {
			if err := s.Restore(ctx, ReplaceScript(six)); err != nil {
				return err
			}
			var err error
			sets, err = s.List(ctx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(sets, func(x Set) bool { return x.Name != six.Name })
	}
	direct := func(fn func() error) error { return fn() }
	fake := list(NewFake(), direct)
	if len(fake) != 1 || fake[0].Family != Inet6 || !slices.Equal(fake[0].Members, six.Members) {
		t.Errorf("Fake: %+v, want %+v", fake, six)
	}
	if err := NewFake().Restore(ctx, []byte("create SVCP-TEST-6 hash:ip,port family inet6\nadd SVCP-TEST-6 198.18.0.10,tcp:80\n")); err == nil {
		t.Error("Fake: an IPv4 member in an inet6 set: no error")
	}

	netnstest.RequireRoot(t, "ipset")
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ns := netnstest.New(t)
	if err := ns.Do(func() error { _, err := r.List(ctx); return err }); err != nil {
		t.Skipf("needs IP sets in the kernel (ip_set): %v", err)
	}
	if real := list(r, ns.Do); len(real) != 1 || real[0].Family != Inet6 || !slices.Equal(real[0].Members, six.Members) {
		t.Errorf("Real: %+v, want %+v", real, six)
	}
}
