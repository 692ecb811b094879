package link

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// exercise runs the same steps on any Interface.
func exercise(t *testing.T, l Interface) {
	t.Helper()
	ctx := context.Background()
	const dev = "svcp-test0"
	v4 := netip.MustParsePrefix("198.18.0.10/32")
	v6 := netip.MustParsePrefix("2001:db8::10/128")
	if _, err := l.Addresses(ctx, dev); !errors.Is(err, ErrNotExist) {
		t.Fatalf("Addresses of a missing link: %v, want ErrNotExist", err)
	}
	for range 2 { // idempotent
		if err := l.EnsureDummy(ctx, dev); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []netip.Prefix{v4, v6} {
		if err := l.AddAddress(ctx, dev, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.AddAddress(ctx, dev, v4); !errors.Is(err, ErrExist) {
		t.Errorf("AddAddress twice: %v, want ErrExist", err)
	}
	got, err := l.Addresses(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, v4) || !slices.Contains(got, v6) {
		t.Errorf("Addresses = %v, want %s and %s among them", got, v4, v6)
	}
	if err := l.DeleteAddress(ctx, dev, v4); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteAddress(ctx, dev, v4); !errors.Is(err, ErrNotExist) {
		t.Errorf("DeleteAddress twice: %v, want ErrNotExist", err)
	}
	if err := l.DeleteLink(ctx, dev); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteLink(ctx, dev); !errors.Is(err, ErrNotExist) {
		t.Errorf("DeleteLink twice: %v, want ErrNotExist", err)
	}
}

func TestFake(t *testing.T) {
	f := NewFake()
	f.AddLink("lo", "loopback", netip.MustParsePrefix("127.0.0.1/8"))
	exercise(t, f)
	if err := f.EnsureDummy(context.Background(), "lo"); err == nil {
		t.Error("EnsureDummy(lo): no error, want 'want dummy'")
	}
	if err := f.EnsureDummy(context.Background(), "a-name-longer-than-15"); err == nil {
		t.Error("EnsureDummy with a 21-byte name: no error")
	}
}

func TestNetlink(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t)
	var l *Netlink
	// The socket is made inside the namespace and stays there; the test uses it from
	// its own goroutine (t.Fatal must not run on Do's).
	if err := ns.Do(func() (err error) { l, err = New(); return err }); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err := l.EnsureDummy(context.Background(), "svcp-probe0")
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("needs the dummy link type (CONFIG_DUMMY; the VM tests of make test-ipvs have it): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, l)
	if err := l.EnsureDummy(context.Background(), "lo"); err == nil {
		t.Error("EnsureDummy(lo): no error, want 'want dummy'")
	}
}

func TestSysctls(t *testing.T) {
	ctx := context.Background()
	f := &FakeSysctls{}
	if v, err := f.Sysctl(ctx, "net.ipv4.vs.conntrack"); err != nil || v != "0" {
		t.Errorf("unset key = %q, %v; want 0", v, err)
	}
	if err := f.SetSysctl(ctx, "net.ipv4.vs.conntrack", "1"); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Sysctl(ctx, "net.ipv4.vs.conntrack"); v != "1" {
		t.Errorf("after set: %q, want 1", v)
	}
	for _, bad := range []string{"kernel.panic", "net/ipv4/ip_forward", "net.ipv4....x"} {
		if err := f.SetSysctl(ctx, bad, "1"); err == nil {
			t.Errorf("SetSysctl(%q): no error", bad)
		}
	}

	netnstest.RequireRoot(t)
	ns := netnstest.New(t)
	err := ns.Do(func() error {
		p := ProcSys{}
		if err := p.SetSysctl(ctx, "net.ipv4.conf.all.arp_ignore", "1"); err != nil {
			return err
		}
		v, err := p.Sysctl(ctx, "net.ipv4.conf.all.arp_ignore")
		if err == nil && v != "1" {
			err = errors.New("arp_ignore reads " + v + " after writing 1")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
