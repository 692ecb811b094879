package dnsresolve

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service"
)

func TestServeZone(t *testing.T) {
	s := newServer(t, Config{})
	tests := []struct {
		name   string
		qname  string
		qtype  uint16
		rcode  int
		answer []string
	}{
		{name: "A", qname: "web.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"web.default.svc.cluster.local. 5 IN A 198.18.0.10"}},
		{name: "case kept", qname: "Web.DEFAULT.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"Web.DEFAULT.svc.cluster.local. 5 IN A 198.18.0.10"}},
		{name: "NXDOMAIN", qname: "nope.default.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "NODATA", qname: "web.default.svc.cluster.local.", qtype: dns.TypeMX},
		{name: "ExternalName without upstream: CNAME only", qname: "ext.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"ext.default.svc.cluster.local. 5 IN CNAME example.org."}},
	}
	for _, tt := range tests {
		for _, udp := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/udp=%v", tt.name, udp), func(t *testing.T) {
				m := ask(t, s, question(tt.qname, tt.qtype), udp)
				if m.Rcode != tt.rcode || !m.Authoritative || m.Truncated {
					t.Errorf("rcode %s aa %v tc %v, want %s aa", dns.RcodeToString[m.Rcode], m.Authoritative, m.Truncated, dns.RcodeToString[tt.rcode])
				}
				assertRRs(t, "answer", m.Answer, tt.answer)
				if len(m.Answer) == 0 {
					assertRRs(t, "authority", m.Ns, []string{soaOf(s)})
				}
			})
		}
	}
}

// soaOf is the SOA of s's current Index in zone-file syntax (the serial is the clock's).
func soaOf(s *Server) string { return s.index.Load().soa.String() }

func TestServeProtocol(t *testing.T) {
	s := newServer(t, Config{})
	edns := func(m *dns.Msg, version uint8) *dns.Msg {
		m.SetEdns0(1232, false)
		m.IsEdns0().SetVersion(version)
		return m
	}
	tests := []struct {
		name  string
		req   *dns.Msg
		rcode int // -1: no answer at all
	}{
		{name: "update is not implemented", req: func() *dns.Msg {
			m := question("cluster.local.", dns.TypeSOA)
			m.Opcode = dns.OpcodeUpdate
			return m
		}(), rcode: dns.RcodeNotImplemented},
		{name: "no question", req: &dns.Msg{}, rcode: dns.RcodeFormatError},
		{name: "two questions", req: func() *dns.Msg {
			m := question("web.default.svc.cluster.local.", dns.TypeA)
			m.Question = append(m.Question, m.Question[0])
			return m
		}(), rcode: dns.RcodeFormatError},
		{name: "EDNS version 1", req: edns(question("web.default.svc.cluster.local.", dns.TypeA), 1), rcode: dns.RcodeBadVers},
		{name: "EDNS version 0", req: edns(question("web.default.svc.cluster.local.", dns.TypeA), 0), rcode: dns.RcodeSuccess},
		{name: "zone transfer", req: question("cluster.local.", dns.TypeAXFR), rcode: dns.RcodeRefused},
		{name: "CHAOS in the zone", req: func() *dns.Msg {
			m := question("web.default.svc.cluster.local.", dns.TypeTXT)
			m.Question[0].Qclass = dns.ClassCHAOS
			return m
		}(), rcode: dns.RcodeRefused},
		{name: "no upstream", req: question("example.org.", dns.TypeA), rcode: dns.RcodeRefused},
		{name: "a response is not answered", req: func() *dns.Msg {
			m := question("web.default.svc.cluster.local.", dns.TypeA)
			m.Response = true
			return m
		}(), rcode: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ask(t, s, tt.req, true)
			if tt.rcode < 0 {
				if m != nil {
					t.Fatalf("answered %v", m)
				}
				return
			}
			if m == nil {
				t.Fatal("no answer")
			}
			if m.Rcode != tt.rcode {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tt.rcode])
			}
			if m.Id != tt.req.Id {
				t.Errorf("id = %d, want %d", m.Id, tt.req.Id)
			}
			if (tt.req.IsEdns0() != nil) != (m.IsEdns0() != nil) {
				t.Errorf("OPT in answer: %v, in question: %v", m.IsEdns0() != nil, tt.req.IsEdns0() != nil)
			}
		})
	}
}

func TestServeNotReady(t *testing.T) {
	s, err := New(Config{TTL: 5})
	if err != nil {
		t.Fatal(err)
	}
	h := s.HTTPHandler()
	if code := get(t, h, "/healthz"); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz before the first snapshot = %d, want 503", code)
	}
	if m := ask(t, s, question("web.default.svc.cluster.local.", dns.TypeA), true); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("rcode before the first snapshot = %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
	s.Update(testSnapshot(t))
	if code := get(t, h, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after the first snapshot = %d, want 200", code)
	}
	if m := ask(t, s, question("web.default.svc.cluster.local.", dns.TypeA), true); m.Rcode != dns.RcodeSuccess {
		t.Errorf("rcode after the first snapshot = %s, want NOERROR", dns.RcodeToString[m.Rcode])
	}
}

func get(t *testing.T, h http.Handler, path string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code
}

func TestTruncation(t *testing.T) {
	big := newService("default", "big")
	big.Headless = true
	var eps []service.Endpoint
	for i := range 100 {
		eps = append(eps, ep(fmt.Sprintf("198.19.2.%d:80", i+1), "", true))
	}
	addPort(big, "http", service.TCP, 80, eps...)
	s, err := New(Config{TTL: 5})
	if err != nil {
		t.Fatal(err)
	}
	s.Update(service.NewSnapshot([]*service.Service{big}, nil))

	const name = "big.default.svc.cluster.local."
	withEDNS := func(size uint16) *dns.Msg {
		m := question(name, dns.TypeA)
		m.SetEdns0(size, false)
		return m
	}
	tests := []struct {
		name    string
		req     *dns.Msg
		udp     bool
		tc      bool
		answers int // -1: fewer than all
	}{
		{name: "UDP without EDNS: 512 bytes", req: question(name, dns.TypeA), udp: true, tc: true, answers: -1},
		{name: "UDP with a small EDNS buffer", req: withEDNS(800), udp: true, tc: true, answers: -1},
		{name: "UDP with EDNS 4096", req: withEDNS(4096), udp: true, answers: 100},
		{name: "TCP", req: question(name, dns.TypeA), answers: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ask(t, s, tt.req, tt.udp)
			if m.Truncated != tt.tc {
				t.Errorf("TC = %v, want %v", m.Truncated, tt.tc)
			}
			if tt.answers >= 0 && len(m.Answer) != tt.answers || tt.answers < 0 && len(m.Answer) >= 100 {
				t.Errorf("%d answers, want %d", len(m.Answer), tt.answers)
			}
		})
	}
}
