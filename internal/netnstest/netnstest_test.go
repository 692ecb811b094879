package netnstest

import (
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
