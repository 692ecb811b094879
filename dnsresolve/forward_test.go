package dnsresolve

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestForward(t *testing.T) {
	tests := []struct {
		name      string
		upstreams func(t *testing.T) []string
		rcode     int
		answer    []string
	}{
		{
			name:      "answered",
			upstreams: func(t *testing.T) []string { return []string{startUpstream(t, answerA).addr} },
			answer:    []string{"example.org. 60 IN A 192.0.2.1"},
		},
		{
			name: "first upstream down, second answers",
			upstreams: func(t *testing.T) []string {
				return []string{deadAddr(t), startUpstream(t, answerA).addr}
			},
			answer: []string{"example.org. 60 IN A 192.0.2.1"},
		},
		{
			name: "SERVFAIL from the first, second answers",
			upstreams: func(t *testing.T) []string {
				fail := startUpstream(t, func(w dns.ResponseWriter, req *dns.Msg) {
					_ = w.WriteMsg(new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
				})
				return []string{fail.addr, startUpstream(t, answerA).addr}
			},
			answer: []string{"example.org. 60 IN A 192.0.2.1"},
		},
		{
			name: "truncated over UDP, asked again over TCP",
			upstreams: func(t *testing.T) []string {
				return []string{startUpstream(t, func(w dns.ResponseWriter, req *dns.Msg) {
					if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
						m := new(dns.Msg).SetReply(req)
						m.Truncated = true
						_ = w.WriteMsg(m)
						return
					}
					answerA(w, req)
				}).addr}
			},
			answer: []string{"example.org. 60 IN A 192.0.2.1"},
		},
		{
			name:      "all upstreams fail",
			upstreams: func(t *testing.T) []string { return []string{deadAddr(t), deadAddr(t)} },
			rcode:     dns.RcodeServerFailure,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, Config{Upstreams: tt.upstreams(t)})
			req := question("example.org.", dns.TypeA)
			req.SetEdns0(1232, false)
			m := ask(t, s, req, true)
			if m.Rcode != tt.rcode {
				t.Fatalf("rcode = %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tt.rcode])
			}
			if m.Id != req.Id || m.Authoritative {
				t.Errorf("id %d aa %v, want id %d and not authoritative", m.Id, m.Authoritative, req.Id)
			}
			assertRRs(t, "answer", m.Answer, tt.answer)
			if opt := m.IsEdns0(); opt == nil || opt.UDPSize() != serverUDPSize || len(opt.Option) != 0 {
				t.Errorf("OPT = %v, want ours (size %d, no options)", opt, serverUDPSize)
			}
		})
	}
}

func TestForwardCache(t *testing.T) {
	up := startUpstream(t, answerA)
	clk := newClock()
	s := newServer(t, Config{Upstreams: []string{up.addr}, Now: clk.Now})
	tests := []struct {
		name    string
		advance time.Duration
		qname   string
		ttl     uint32
		asked   int // upstream queries so far
	}{
		{name: "miss", qname: "example.org.", ttl: 60, asked: 1},
		{name: "hit, TTL aged", advance: 15 * time.Second, qname: "example.org.", ttl: 45, asked: 1},
		{name: "hit in another case", qname: "EXAMPLE.org.", ttl: 45, asked: 1},
		{name: "expired", advance: 45 * time.Second, qname: "example.org.", ttl: 60, asked: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk.Advance(tt.advance)
			m := ask(t, s, question(tt.qname, dns.TypeA), true)
			if len(m.Answer) != 1 || m.Answer[0].Header().Ttl != tt.ttl {
				t.Errorf("answer %v, want one record with TTL %d", m.Answer, tt.ttl)
			}
			if m.Question[0].Name != tt.qname {
				t.Errorf("question %q, want %q", m.Question[0].Name, tt.qname)
			}
			if got := up.count(); got != tt.asked {
				t.Errorf("upstream asked %d times, want %d", got, tt.asked)
			}
		})
	}
}

func TestCacheTTL(t *testing.T) {
	rrs := func(ss ...string) []dns.RR {
		var out []dns.RR
		for _, s := range ss {
			rr, err := dns.NewRR(s)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, rr)
		}
		return out
	}
	tests := []struct {
		name   string
		msg    *dns.Msg
		ttl    uint32
		cached bool
	}{
		{name: "lowest TTL", msg: &dns.Msg{Answer: rrs("a. 30 IN CNAME b.", "b. 10 IN A 192.0.2.1")}, ttl: 10, cached: true},
		{name: "negative: SOA minimum", msg: &dns.Msg{Ns: rrs("org. 900 IN SOA a. b. 1 2 3 4 300")}, ttl: 300, cached: true},
		{name: "negative: SOA TTL", msg: &dns.Msg{Ns: rrs("org. 60 IN SOA a. b. 1 2 3 4 300")}, ttl: 60, cached: true},
		{name: "negative without SOA", msg: &dns.Msg{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ttl, ok := cacheTTL(tt.msg)
			if ttl != tt.ttl || ok != tt.cached {
				t.Errorf("cacheTTL = %d %v, want %d %v", ttl, ok, tt.ttl, tt.cached)
			}
		})
	}
}

func TestExternalNameChase(t *testing.T) {
	up := startUpstream(t, answerA)
	s := newServer(t, Config{Upstreams: []string{up.addr}})
	m := ask(t, s, question("ext.default.svc.cluster.local.", dns.TypeA), true)
	assertRRs(t, "answer", m.Answer, []string{
		"ext.default.svc.cluster.local. 5 IN CNAME example.org.",
		"example.org. 60 IN A 192.0.2.1",
	})
}

func TestLoopSelf(t *testing.T) {
	pc, ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := startUpstream(t, answerA)
	// The server's own address first: Serve must see it is itself.
	s := newServer(t, Config{Upstreams: []string{pc.LocalAddr().String(), up.addr}})
	addr := serve(t, s, pc, ln)

	m, _, err := new(dns.Client).Exchange(question("example.org.", dns.TypeA), addr)
	if err != nil {
		t.Fatal(err)
	}
	assertRRs(t, "answer", m.Answer, []string{"example.org. 60 IN A 192.0.2.1"})
	if !s.fwd.upstreams[0].looping.Load() || s.fwd.active() != 1 {
		t.Errorf("own address not marked as a loop")
	}
}

func TestLoopRelay(t *testing.T) {
	tests := []struct {
		name  string
		relay func(req *dns.Msg) *dns.Msg // what the relay sends us for req
	}{
		// Passes the query on as it is, EDNS options included: the nonce tells.
		{name: "verbatim", relay: func(req *dns.Msg) *dns.Msg { return req }},
		// Asks afresh, like systemd-resolved: only the probe's name tells.
		{name: "fresh query", relay: func(req *dns.Msg) *dns.Msg {
			return question(req.Question[0].Name, req.Question[0].Qtype)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc, ln, err := Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			self := pc.LocalAddr().String()
			relay := startUpstream(t, func(w dns.ResponseWriter, req *dns.Msg) {
				m, _, err := new(dns.Client).Exchange(tt.relay(req.Copy()), self)
				if err != nil {
					_ = w.WriteMsg(new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
					return
				}
				m.Id = req.Id
				_ = w.WriteMsg(m)
			})
			s := newServer(t, Config{Upstreams: []string{relay.addr}, UpstreamTimeout: time.Second})
			serve(t, s, pc, ln)

			// probeLoop returns once the relay answered, so after the probe came back to us.
			s.fwd.probeLoop(context.Background(), s.fwd.upstreams[0])
			if s.fwd.active() != 0 {
				t.Fatal("relay back to us not detected")
			}
			if m := ask(t, s, question("example.org.", dns.TypeA), true); m.Rcode != dns.RcodeServerFailure {
				t.Errorf("rcode = %s, want SERVFAIL with every upstream looping", dns.RcodeToString[m.Rcode])
			}
		})
	}
}

func TestLoopNonce(t *testing.T) {
	s := newServer(t, Config{Upstreams: []string{"192.0.2.53", "192.0.2.54:5353"}})
	f := s.fwd
	q := f.query(question("example.org.", dns.TypeA))
	f.loops.tag(q, f.nonce, 1)
	if !f.isLoop(q) {
		t.Fatal("our own forwarded query not recognised")
	}
	if f.upstreams[0].looping.Load() || !f.upstreams[1].looping.Load() {
		t.Errorf("looping = %v %v, want only the second upstream", f.upstreams[0].looping.Load(), f.upstreams[1].looping.Load())
	}
	other := newServer(t, Config{Upstreams: []string{"192.0.2.53"}})
	if other.fwd.isLoop(q) {
		t.Error("another server's forwarded query taken for a loop")
	}
}

func TestUpstreamAddr(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{in: "192.0.2.1", want: "192.0.2.1:53"},
		{in: "192.0.2.1:5353", want: "192.0.2.1:5353"},
		{in: "fd00::53", want: "[fd00::53]:53"},
		{in: "[fd00::53]:5353", want: "[fd00::53]:5353"},
		{in: "dns.example:53", want: "dns.example:53"},
		{in: "dns.example", err: `upstream "dns.example": not an IP address or host:port`},
	}
	for _, tt := range tests {
		got, err := upstreamAddr(tt.in)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && err.Error() != tt.err) {
			t.Errorf("upstreamAddr(%q) = %q, %v; want %q, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
}
