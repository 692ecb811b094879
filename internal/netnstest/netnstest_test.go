package netnstest

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestVethTCP(t *testing.T) {
	RequireRoot(t)
	var name string
	t.Run("pair", func(t *testing.T) {
		a, b := New(t), New(t)
		name = a.Name
		Veth(t, a, "a0", netip.MustParsePrefix("198.19.9.1/30"), b, "b0", netip.MustParsePrefix("198.19.9.2/30"))

		var ln net.Listener
		if err := b.Do(func() (err error) {
			ln, err = net.Listen("tcp", "198.19.9.2:0")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, _ = io.WriteString(c, c.RemoteAddr().String())
				c.Close()
			}
		}()
		var got []byte
		if err := a.Do(func() error {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return err
			}
			defer c.Close()
			got, err = io.ReadAll(c)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(got), "198.19.9.1:") {
			t.Errorf("server saw %q, want the client at 198.19.9.1", got)
		}

		// A process forked from Do's thread inherits the namespace.
		var out []byte
		if err := a.Do(func() (err error) {
			out, err = exec.Command("ip", "-o", "addr", "show", "dev", "a0").CombinedOutput()
			return err
		}); err != nil {
			t.Fatalf("ip addr in %s: %v: %s", a.Name, err, out)
		}
		if !strings.Contains(string(out), "198.19.9.1") {
			t.Errorf("exec from Do did not run inside the namespace: %s", out)
		}
	})
	if _, err := os.Stat("/run/netns/" + name); !os.IsNotExist(err) {
		t.Errorf("namespace %s still exists after the test (stat: %v)", name, err)
	}
}

// TestAddAddrIPv6Usable: an IPv6 address is usable the moment AddAddr
// returns: a listener binds it and a connect() to it from the namespace
// succeeds (no "network is unreachable" while the kernel's work queue has
// not put its route in the local table yet). On a link that is still down,
// AddAddr returns as well, with the address complete.
func TestAddAddrIPv6Usable(t *testing.T) {
	RequireRoot(t)
	ns := New(t)
	for i := 1; i <= 8; i++ {
		a := netip.MustParseAddr(fmt.Sprintf("2001:db8:19::7:%x", i))
		ns.AddAddr(t, "lo", netip.PrefixFrom(a, 128))
		if err := ns.Do(func() error {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
			if err != nil {
				return err
			}
			defer ln.Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return err
			}
			return c.Close()
		}); err != nil {
			t.Errorf("right after AddAddr(lo, %s): %v", a, err)
		}
	}

	ns.Run(t, "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	ns.AddAddr(t, "d0", netip.MustParsePrefix("2001:db8:19::8:1/112")) // d0 is down
	if out := ns.Run(t, "ip", "-6", "route", "show", "table", "local", "2001:db8:19::8:1/128"); !strings.Contains(out, "2001:db8:19::8:1") {
		t.Errorf("after AddAddr on the down d0, the local table has no route to 2001:db8:19::8:1: %q", out)
	}
}
