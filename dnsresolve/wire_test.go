package dnsresolve

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service"
)

// slowAnswer is the dns.Msg path's answer to req, as the client decodes it.
func slowAnswer(t *testing.T, s *Server, req *dns.Msg, udp bool) *dns.Msg {
	t.Helper()
	resp := s.answer(context.Background(), req, &query{})
	s.fit(resp, req, udp)
	b, err := resp.Pack()
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatal(err)
	}
	return m
}

// fastAnswer is the encoded path's answer to req, or nil when it leaves req
// to the dns.Msg path.
func fastAnswer(t *testing.T, s *Server, req *dns.Msg, udp bool) *dns.Msg {
	t.Helper()
	w := &recorder{udp: udp}
	if !s.answerEncoded(w, req, time.Now()) {
		return nil
	}
	return w.msg
}

// TestWireSameAnswers: for every question the encoded path takes, its answer
// is the dns.Msg path's, record for record and flag for flag, over UDP and
// TCP, with and without EDNS0 (and DO), whatever the spelling; and it
// leaves to the dns.Msg path what it must.
func TestWireSameAnswers(t *testing.T) {
	up := startUpstream(t, answerA)
	s := newServer(t, Config{Upstreams: []string{up.addr}})
	type q struct {
		name  string
		qtype uint16
	}
	fast := []q{
		{"web.default.svc.cluster.local.", dns.TypeA},
		{"WEB.Default.svc.cluster.local.", dns.TypeA},
		{"web.default.svc.cluster.local.", dns.TypeAAAA},
		{"web.default.svc.cluster.local.", dns.TypeSRV},
		{"web.default.svc.cluster.local.", dns.TypeANY},
		{"web.default.svc.cluster.local.", dns.TypeMX},
		{"_http._tcp.web.default.svc.cluster.local.", dns.TypeSRV},
		{"_HTTP._TCP.Web.default.svc.cluster.local.", dns.TypeSRV},
		{"_dns._udp.web.default.svc.cluster.local.", dns.TypeA},
		{"_tcp.web.default.svc.cluster.local.", dns.TypeSRV},
		{"db.default.svc.cluster.local.", dns.TypeA},
		{"db.default.svc.cluster.local.", dns.TypeSRV},
		{"db-0.db.default.svc.cluster.local.", dns.TypeA},
		{"_pg._tcp.db.default.svc.cluster.local.", dns.TypeSRV},
		{"10.0.18.198.in-addr.arpa.", dns.TypePTR},
		{"v6.kube-system.svc.cluster.local.", dns.TypeAAAA},
		{"cluster.local.", dns.TypeSOA},
		{"cluster.local.", dns.TypeNS},
		{"dns-version.cluster.local.", dns.TypeTXT},
		{"default.svc.cluster.local.", dns.TypeA},
		{"nope.default.svc.cluster.local.", dns.TypeA},
		{"web.default.svc.cluster.local.other.svc.cluster.local.", dns.TypeAAAA},
		{"_x._tcp.web.default.svc.cluster.local.", dns.TypeSRV},
		{"ext.default.svc.cluster.local.", dns.TypeCNAME},
		{"example.org.", dns.TypeA}, // a forwarded name, once it is cached
	}
	slow := []q{
		{"ext.default.svc.cluster.local.", dns.TypeA},     // the CNAME is chased
		{"1-2-3-4.default.pod.cluster.local.", dns.TypeA}, // pods insecure
		{"we\\.b.default.svc.cluster.local.", dns.TypeA},  // an escape
		{"example.net.", dns.TypeA},                       // forwarded, not cached yet
		{"cluster.local.", dns.TypeAXFR},
	}
	variants := []struct {
		name string
		set  func(*dns.Msg)
	}{
		{"plain", func(*dns.Msg) {}},
		{"edns", func(m *dns.Msg) { m.SetEdns0(1232, false) }},
		{"edns+do+cd", func(m *dns.Msg) { m.SetEdns0(4096, true); m.CheckingDisabled = true }},
		{"no rd", func(m *dns.Msg) { m.RecursionDesired = false }},
	}
	for _, v := range variants {
		for _, udp := range []bool{true, false} {
			for _, x := range fast {
				t.Run(fmt.Sprintf("%s/%d/%s/udp=%v", x.name, x.qtype, v.name, udp), func(t *testing.T) {
					req := question(x.name, x.qtype)
					v.set(req)
					if x.name == "example.org." {
						_ = ask(t, s, req, udp) // the cache's key has DO and CD
					}
					got := fastAnswer(t, s, req, udp)
					want := slowAnswer(t, s, req, udp)
					if got == nil {
						limit := dns.MinMsgSize
						if opt := req.IsEdns0(); opt != nil {
							limit = int(opt.UDPSize())
						}
						if !udp || want.Len() <= limit {
							t.Fatal("left to the dns.Msg path")
						}
						return // fits the client compressed only: the dns.Msg path compresses
					}
					if got.String() != want.String() {
						t.Errorf("encoded answer:\n%s\nthe dns.Msg path's:\n%s", got, want)
					}
				})
			}
			for _, x := range slow {
				req := question(x.name, x.qtype)
				v.set(req)
				if got := fastAnswer(t, s, req, udp); got != nil {
					t.Errorf("%s %d (%s): answered encoded, want the dns.Msg path:\n%s", x.name, x.qtype, v.name, got)
				}
			}
		}
	}
}

// TestWireForwardedAges: a cached forwarded answer's TTLs go down with the
// time it spent in the cache, as the dns.Msg path's do.
func TestWireForwardedAges(t *testing.T) {
	up := startUpstream(t, answerA)
	clk := newClock()
	s := newServer(t, Config{Upstreams: []string{up.addr}, Now: clk.Now})
	req := question("Example.ORG.", dns.TypeA)
	if m := ask(t, s, req, true); len(m.Answer) != 1 {
		t.Fatalf("first answer %v", m)
	}
	clk.Advance(25 * time.Second)
	got := fastAnswer(t, s, req, true)
	if got == nil || len(got.Answer) != 1 || got.Answer[0].Header().Ttl != 35 || got.Question[0].Name != "Example.ORG." {
		t.Fatalf("answer after 25 s: %v, want TTL 35 and the client's spelling", got)
	}
	if want := slowAnswer(t, s, req, true); got.String() != want.String() {
		t.Errorf("encoded:\n%s\ndns.Msg path:\n%s", got, want)
	}
	clk.Advance(40 * time.Second) // expired
	if got := fastAnswer(t, s, req, true); got != nil {
		t.Errorf("expired answer served encoded: %v", got)
	}
}

// TestWireTruncates: an answer larger than the client's UDP size goes the
// dns.Msg path, which truncates it.
func TestWireTruncates(t *testing.T) {
	s := newServer(t, Config{})
	s.Update(manyPorts(60))
	req := question("big.default.svc.cluster.local.", dns.TypeSRV)
	if got := fastAnswer(t, s, req, true); got != nil {
		t.Errorf("a %d-byte answer over UDP without EDNS: answered encoded", got.Len())
	}
	if got := fastAnswer(t, s, req, false); got == nil || got.Truncated || len(got.Answer) != 60 {
		t.Errorf("over TCP: %v, want all 60 records", got)
	}
}

// TestTTLOffsets walks a packed message with compression pointers.
func TestTTLOffsets(t *testing.T) {
	m := new(dns.Msg).SetQuestion("example.org.", dns.TypeA)
	for _, s := range []string{"example.org. 60 IN A 192.0.2.1", "example.org. 70 IN A 192.0.2.2"} {
		rr, _ := dns.NewRR(s)
		m.Answer = append(m.Answer, rr)
	}
	m.Compress = true
	b, _ := m.Pack()
	offs, err := ttlOffsets(b)
	if err != nil || len(offs) != 2 {
		t.Fatalf("ttlOffsets = %v, %v", offs, err)
	}
	for i, want := range []uint32{60, 70} {
		if got := uint32(b[offs[i]])<<24 | uint32(b[offs[i]+1])<<16 | uint32(b[offs[i]+2])<<8 | uint32(b[offs[i]+3]); got != want {
			t.Errorf("record %d: TTL %d at offset %d, want %d", i, got, offs[i], want)
		}
	}
	if _, err := ttlOffsets(b[:len(b)-1]); err == nil {
		t.Error("a message cut short: no error")
	}
}

func TestUnder(t *testing.T) {
	for _, tc := range []struct {
		name, zone string
		want       bool
	}{
		{"cluster.local.", "cluster.local.", true},
		{"a.cluster.local.", "cluster.local.", true},
		{"acluster.local.", "cluster.local.", false},
		{"example.org.", "cluster.local.", false},
		{"example.org.", ".", true},
	} {
		if got := under(tc.name, tc.zone); got != tc.want {
			t.Errorf("under(%q, %q) = %v", tc.name, tc.zone, got)
		}
	}
}

// manyPorts is one Service, big.default, with n named ports: an SRV
// answer of n records.
func manyPorts(n int) *service.Snapshot {
	big := newService("default", "big", "198.18.0.99")
	for i := range n {
		addPort(big, fmt.Sprintf("port-%d", i), service.TCP, uint16(1000+i))
	}
	return service.NewSnapshot([]*service.Service{big}, nil)
}

// TestWireFollowsSnapshot: an encoded answer belongs to the Index of one
// Snapshot. A Service whose ClusterIP or port changes answers with the new
// ones from the next question on, and a Service removed is NXDOMAIN, though
// the old answers were kept encoded.
func TestWireFollowsSnapshot(t *testing.T) {
	s, err := New(Config{TTL: 5})
	if err != nil {
		t.Fatal(err)
	}
	snap := func(ip string, port uint16) *service.Snapshot {
		if ip == "" {
			return service.NewSnapshot(nil, nil)
		}
		web := newService("default", "web", ip)
		addPort(web, "http", service.TCP, port)
		return service.NewSnapshot([]*service.Service{web}, nil)
	}
	check := func(step string, wantA string, wantPort uint16) {
		t.Helper()
		for range 2 { // the first question encodes the answer, the second reads it kept
			a := fastAnswer(t, s, question("web.default.svc.cluster.local.", dns.TypeA), true)
			srv := fastAnswer(t, s, question("_http._tcp.web.default.svc.cluster.local.", dns.TypeSRV), true)
			if a == nil || srv == nil {
				t.Fatalf("%s: left to the dns.Msg path", step)
			}
			if wantA == "" {
				if a.Rcode != dns.RcodeNameError || srv.Rcode != dns.RcodeNameError {
					t.Fatalf("%s: rcodes %s and %s, want NXDOMAIN", step, dns.RcodeToString[a.Rcode], dns.RcodeToString[srv.Rcode])
				}
				continue
			}
			if len(a.Answer) != 1 || a.Answer[0].(*dns.A).A.String() != wantA {
				t.Fatalf("%s: A answer %v, want %s", step, a.Answer, wantA)
			}
			if len(srv.Answer) != 1 || srv.Answer[0].(*dns.SRV).Port != wantPort {
				t.Fatalf("%s: SRV answer %v, want port %d", step, srv.Answer, wantPort)
			}
		}
	}
	s.Update(snap("198.18.0.10", 80))
	check("first", "198.18.0.10", 80)
	s.Update(snap("198.18.0.20", 8080))
	check("ClusterIP and port changed", "198.18.0.20", 8080)
	s.Update(snap("", 0))
	check("Service removed", "", 0)
}

// TestWireOverSockets asks the real server over UDP and TCP with a name in
// mixed case (DNS 0x20: a resolver checks that the answer repeats its
// spelling) and a random ID: both come back as asked, in the question and
// in the owner names; the OPT record only when the client sent one, with
// its DO bit; over UDP an answer too large for the client is truncated (TC)
// and whole over TCP.
func TestWireOverSockets(t *testing.T) {
	s := newServer(t, Config{})
	addr := serve(t, s, nil, nil)
	const name = "wEb.DeFaUlT.sVc.ClUsTeR.LoCaL."
	for _, tc := range []struct {
		net      string
		edns, do bool
	}{
		{net: "udp"},
		{net: "udp", edns: true},
		{net: "udp", edns: true, do: true},
		{net: "tcp"},
		{net: "tcp", edns: true, do: true},
	} {
		t.Run(fmt.Sprintf("%s/edns=%v/do=%v", tc.net, tc.edns, tc.do), func(t *testing.T) {
			c := &dns.Client{Net: tc.net, Timeout: 5 * time.Second}
			for range 3 { // encoded on the first question, kept for the others
				req := question(name, dns.TypeA)
				if tc.edns {
					req.SetEdns0(1232, tc.do)
				}
				resp, _, err := c.Exchange(req, addr)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Id != req.Id || len(resp.Question) != 1 || resp.Question[0] != req.Question[0] {
					t.Fatalf("ID %d question %v, want %d %v", resp.Id, resp.Question, req.Id, req.Question[0])
				}
				if len(resp.Answer) != 1 || resp.Answer[0].Header().Name != name || resp.Answer[0].(*dns.A).A.String() != "198.18.0.10" {
					t.Fatalf("answer %v, want %s A 198.18.0.10", resp.Answer, name)
				}
				opt := resp.IsEdns0()
				if (opt != nil) != tc.edns || (opt != nil && (opt.Do() != tc.do || opt.UDPSize() != serverUDPSize)) {
					t.Fatalf("OPT %v, want one (DO %v) only when asked with one", opt, tc.do)
				}
			}
		})
	}

	s.Update(manyPorts(60))
	req := question("Big.Default.svc.cluster.local.", dns.TypeSRV)
	udp, _, err := (&dns.Client{Net: "udp", Timeout: 5 * time.Second}).Exchange(req, addr)
	if err != nil {
		t.Fatal(err)
	}
	udp.Compress = true // as it came: Len counts the bytes the server wrote
	if !udp.Truncated || udp.Len() > dns.MinMsgSize {
		t.Errorf("60 SRV records over UDP without EDNS0: TC %v, %d bytes; want TC and at most 512", udp.Truncated, udp.Len())
	}
	tcp, _, err := (&dns.Client{Net: "tcp", Timeout: 5 * time.Second}).Exchange(req, addr)
	if err != nil {
		t.Fatal(err)
	}
	if tcp.Truncated || len(tcp.Answer) != 60 || tcp.Question[0].Name != req.Question[0].Name {
		t.Errorf("over TCP: TC %v, %d records, question %v; want all 60 for %s", tcp.Truncated, len(tcp.Answer), tcp.Question, req.Question[0].Name)
	}
}
