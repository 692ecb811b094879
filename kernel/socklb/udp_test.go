package socklb

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// TestKernelUDP: a UDP echo through a Service address, from processes inside
// the test's cgroup, over IPv4 and IPv6. A connected socket (connect4/6) and
// an unconnected one (sendmsg4/6) both reach the backends, and recvmsg4/6
// shows every reply coming from the Service address the client sent to, not
// from the backend that answered. A process outside the cgroup reaches the
// listener on the VIP itself, untranslated.
func TestKernelUDP(t *testing.T) {
	netnstest.RequireRoot(t)
	cg := newCgroup(t)
	k := newKernel(t, cg.path)
	ns := netnstest.New(t)
	for _, fam := range []struct {
		name     string
		vip      string
		backends []string
		modes    []string
	}{
		{"IPv4", "198.18.0.53", []string{"198.19.0.1", "198.19.0.2"}, []string{"udp", "udp-unconnected", "udp-dualstack"}},
		{"IPv6", "2001:db8:18::53", []string{"2001:db8:19::1", "2001:db8:19::2"}, []string{"udp", "udp-unconnected"}},
	} {
		t.Run(fam.name, func(t *testing.T) {
			vip := netip.AddrPortFrom(netip.MustParseAddr(fam.vip), 53)
			addAddr(t, ns, vip.Addr())
			serveUDP(t, ns, vip.String(), "vip")
			var e Entry
			for _, b := range fam.backends {
				a := netip.MustParseAddr(b)
				addAddr(t, ns, a)
				e.Backends = append(e.Backends, netip.AddrPortFrom(a, 5353))
				serveUDP(t, ns, e.Backends[len(e.Backends)-1].String(), b)
			}
			must(t, k.SetService(context.Background(), Service{VIP: vip.Addr(), Port: 53, Protocol: UDP}, e))
			for _, mode := range fam.modes {
				t.Run(mode, func(t *testing.T) {
					// 40 exchanges miss one of 2 backends with probability 2*(1/2)^40.
					out := clientFrom(t, ns, cg, mode, vip.String(), 40)
					replies := make(map[string]int)
					for _, line := range strings.Split(out, "\n") {
						reply, src, _ := strings.Cut(line, " from ")
						if src != vip.String() {
							t.Errorf("inside the cgroup, %s: reply %q came from %s, want from the VIP %s", mode, reply, src, vip)
						}
						replies[reply]++
					}
					if len(replies) != len(fam.backends) || replies["vip"] != 0 {
						t.Errorf("inside the cgroup, %s: 40 exchanges with %s answered by %v, want each of %v", mode, vip, replies, fam.backends)
					}
				})
			}
			if got, want := clientFrom(t, ns, nil, "udp-unconnected", vip.String(), 1), "vip from "+vip.String(); got != want {
				t.Errorf("outside the cgroup, got %q, want %q (untranslated)", got, want)
			}
		})
	}
}

// serveUDP listens on addr inside ns and answers every datagram with reply.
func serveUDP(t *testing.T, ns *netnstest.NS, addr, reply string) {
	t.Helper()
	var c net.PacketConn
	must(t, ns.Do(func() (err error) { c, err = net.ListenPacket("udp", addr); return err }))
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := c.ReadFrom(buf)
			if err != nil {
				return // closed at cleanup
			}
			_, _ = c.WriteTo([]byte(reply), from)
		}
	}()
}
