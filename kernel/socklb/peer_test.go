package socklb

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// TestKernelGetPeerName: a socket connected through a Service address, TCP
// or UDP, asks getpeername(2) who its peer is and hears the Service address
// (getpeername4/6), though it talks to a backend (the reply names which).
// A process outside the cgroup, reaching the listener on the VIP itself,
// hears the VIP too, and so would without the hooks; one connecting to a
// backend directly from inside hears the backend: its socket has no
// reverse entry.
func TestKernelGetPeerName(t *testing.T) {
	netnstest.RequireRoot(t)
	cg := newCgroup(t)
	k := newKernel(t, cg.path)
	ns := netnstest.New(t)
	for _, fam := range []struct {
		name, vip, backend string
	}{
		{"IPv4", "198.18.0.80", "198.19.0.8"},
		{"IPv6", "2001:db8:18::80", "2001:db8:19::8"},
	} {
		t.Run(fam.name, func(t *testing.T) {
			vip := netip.AddrPortFrom(netip.MustParseAddr(fam.vip), 80)
			backend := netip.AddrPortFrom(netip.MustParseAddr(fam.backend), 8080)
			addAddr(t, ns, vip.Addr())
			addAddr(t, ns, backend.Addr())
			serve(t, ns, vip.String(), "vip")
			serve(t, ns, backend.String(), "backend")
			serveUDP(t, ns, vip.String(), "vip")
			serveUDP(t, ns, backend.String(), "backend")
			for _, p := range []Protocol{TCP, UDP} {
				must(t, k.SetService(context.Background(), Service{VIP: vip.Addr(), Port: 80, Protocol: p}, Entry{Backends: []netip.AddrPort{backend}}))
			}
			for _, tt := range []struct {
				name, mode string
				cg         *cgroup
				dst        netip.AddrPort
				want       string
			}{
				{"TCP through the VIP", "peer-tcp", cg, vip, "backend peer " + vip.String()},
				{"UDP through the VIP", "peer-udp", cg, vip, "backend peer " + vip.String()},
				{"TCP to the backend directly", "peer-tcp", cg, backend, "backend peer " + backend.String()},
				{"TCP outside the cgroup", "peer-tcp", nil, vip, "vip peer " + vip.String()},
			} {
				if got := strings.TrimSpace(clientFrom(t, ns, tt.cg, tt.mode, tt.dst.String(), 1)); got != tt.want {
					t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
				}
			}
		})
	}
}
