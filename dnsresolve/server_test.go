package dnsresolve

import (
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestServeSockets runs the Server on loopback UDP and TCP sockets: garbage is
// dropped without harm, and questions over both transports are answered.
func TestServeSockets(t *testing.T) {
	s := newServer(t, Config{})
	addr := serve(t, s, nil, nil)

	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, junk := range [][]byte{
		{0x01}, // shorter than a header
		{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xff}, // a header, then a broken question
		make([]byte, 3000),
	} {
		if _, err := c.Write(junk); err != nil {
			t.Fatal(err)
		}
	}

	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			cl := &dns.Client{Net: network, Timeout: 5 * time.Second}
			m, _, err := cl.Exchange(question("web.default.svc.cluster.local.", dns.TypeA), addr)
			if err != nil {
				t.Fatal(err)
			}
			assertRRs(t, "answer", m.Answer, []string{"web.default.svc.cluster.local. 5 IN A 198.18.0.10"})
		})
	}
	// A query as large as the buffer size we advertise is read whole: EDNS0
	// padding (RFC 7830) fills it to serverUDPSize.
	t.Run("udp padded to our size", func(t *testing.T) {
		q := question("web.default.svc.cluster.local.", dns.TypeA)
		q.SetEdns0(serverUDPSize, false)
		opt := q.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_PADDING{})
		opt.Option[0].(*dns.EDNS0_PADDING).Padding = make([]byte, serverUDPSize-q.Len())
		if q.Len() != serverUDPSize {
			t.Fatalf("query of %d bytes, want %d", q.Len(), serverUDPSize)
		}
		cl := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
		m, _, err := cl.Exchange(q, addr)
		if err != nil {
			t.Fatal(err)
		}
		assertRRs(t, "answer", m.Answer, []string{"web.default.svc.cluster.local. 5 IN A 198.18.0.10"})
	})
	if n := metricValue(t, s, "clusterdns_invalid_messages_total", nil); n == 0 {
		t.Error("no invalid message counted")
	}
}

func TestNewConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		err  string
	}{
		{name: "defaults", cfg: Config{}},
		{name: "zone", cfg: Config{Zone: "corp.example"}},
		{name: "bad zone", cfg: Config{Zone: "a..b"}, err: `zone "a..b": not a domain name`},
		{name: "root zone", cfg: Config{Zone: "."}, err: `zone ".": not a domain name`},
		{name: "bad upstream", cfg: Config{Upstreams: []string{"1.2.3.4", "nope"}}, err: `upstream "nope": not an IP address or host:port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if (err == nil) != (tt.err == "") || (err != nil && err.Error() != tt.err) {
				t.Errorf("New = %v, want %q", err, tt.err)
			}
		})
	}
}
