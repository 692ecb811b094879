package dnsresolve

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// TestUDPAnswersFromAddressAsked: a server bound to every address answers
// from the address each query was sent to, over IPv4 and IPv6 and for IPv4
// on a dual-stack socket. The client's socket is connected, as a stub
// resolver's is: the kernel drops an answer from any other address, and
// the exchange would time out.
func TestUDPAnswersFromAddressAsked(t *testing.T) {
	for _, tc := range []struct {
		listen string
		ask    []string
	}{
		{"0.0.0.0:0", []string{"127.0.0.1", "127.0.0.2"}},
		{"[::]:0", []string{"::1", "127.0.0.1", "127.0.0.3"}}, // dual-stack
		{"127.0.0.1:0", []string{"127.0.0.1"}},                // one address: no control messages
	} {
		t.Run(tc.listen, func(t *testing.T) {
			pc, ln, err := Listen(tc.listen)
			if err != nil {
				t.Skipf("no %s here: %v", tc.listen, err)
			}
			_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
			s := newServer(t, Config{})
			serve(t, s, pc, ln)
			c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
			for _, ip := range tc.ask {
				for _, spelled := range []string{"web.default.svc.cluster.local.", "nope.default.svc.cluster.local."} {
					req := question(spelled, dns.TypeA)
					resp, _, err := c.Exchange(req, net.JoinHostPort(ip, port))
					if err != nil {
						t.Fatalf("asking %s: %v", ip, err)
					}
					if resp.Id != req.Id || resp.Question[0] != req.Question[0] {
						t.Fatalf("asking %s: answer %v to %v", ip, resp, req)
					}
				}
			}
		})
	}
}

// TestUDPDestination reads the destination address out of the control
// messages the kernel writes.
func TestUDPDestination(t *testing.T) {
	v4 := unix.PktInfo4(&unix.Inet4Pktinfo{Ifindex: 1, Spec_dst: [4]byte{127, 0, 0, 1}, Addr: [4]byte{127, 0, 0, 2}})
	v6 := unix.PktInfo6(&unix.Inet6Pktinfo{Ifindex: 1, Addr: netip.MustParseAddr("::ffff:127.0.0.3").As16()})
	v6only := unix.PktInfo6(&unix.Inet6Pktinfo{Ifindex: 1, Addr: netip.MustParseAddr("2001:db8:18::53").As16()})
	for _, tc := range []struct {
		oob  []byte
		want string
	}{
		{v4, "127.0.0.2"}, // ipi_addr, the header's destination, not ipi_spec_dst
		{v6, "127.0.0.3"}, // an IPv4 query on an IPv6 socket: unmapped
		{v6only, "2001:db8:18::53"},
		{append(append([]byte{}, v6only...), v4...), "2001:db8:18::53"},
		{nil, "invalid IP"},
		{v4[:8], "invalid IP"}, // cut short
	} {
		if got := destination(tc.oob).String(); got != tc.want {
			t.Errorf("destination(% x) = %s, want %s", tc.oob, got, tc.want)
		}
	}
	if need := unix.CmsgSpace(unix.SizeofInet4Pktinfo) + unix.CmsgSpace(unix.SizeofInet6Pktinfo); need > len(udpSession{}.oob) {
		t.Errorf("udpSession.oob holds %d bytes, both control messages need %d", len(udpSession{}.oob), need)
	}
}

// TestUDPSessionAddr: the handler sees a udpSession as a UDP client, of
// the family CoreDNS's metrics give it, printed as a *net.UDPAddr prints.
func TestUDPSessionAddr(t *testing.T) {
	for _, tc := range []struct {
		remote string
		ip6    bool
		str    string
	}{
		{"127.0.0.1:40000", false, "127.0.0.1:40000"},
		{"[::ffff:127.0.0.1]:40000", false, "127.0.0.1:40000"},
		{"[::1]:40000", true, "[::1]:40000"},
	} {
		s := &udpSession{remote: netip.MustParseAddrPort(tc.remote)}
		if !isUDP(s) || isIPv6(s) != tc.ip6 || s.String() != tc.str || s.Network() != "udp" {
			t.Errorf("%s: isUDP %v, isIPv6 %v, String %s", tc.remote, isUDP(s), isIPv6(s), s)
		}
		ua := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(tc.remote))
		if ua.String() != tc.str {
			t.Errorf("%s: a *net.UDPAddr prints %s, the test wants %s", tc.remote, ua, tc.str)
		}
	}
	if isUDP(&net.TCPAddr{}) {
		t.Error("a TCP client taken for UDP")
	}
}
