package dnsresolve

import (
	"testing"

	"github.com/miekg/dns"
)

// FuzzHandler feeds arbitrary messages to the handler, over UDP and TCP, with
// a Snapshot indexed and an upstream to forward to. Whatever comes in, the
// handler must not panic, and an answer must pack, carry the query's ID, fit the
// client's UDP buffer and carry OPT only when the query did. The seeds run in
// every `go test`.
func FuzzHandler(f *testing.F) {
	seeds := []*dns.Msg{
		question("web.default.svc.cluster.local.", dns.TypeA),
		question("_http._tcp.web.default.svc.cluster.local.", dns.TypeSRV),
		question("db.default.svc.cluster.local.", dns.TypeANY),
		question("ext.default.svc.cluster.local.", dns.TypeA),
		question("10.0.18.198.in-addr.arpa.", dns.TypePTR),
		question("nope.svc.cluster.local.", dns.TypeAAAA),
		question("example.org.", dns.TypeA),
		question("cluster.local.", dns.TypeAXFR),
		new(dns.Msg).SetEdns0(4096, true),
	}
	edns := question("Web.Default.svc.cluster.local.", dns.TypeA)
	edns.SetEdns0(0, true)
	edns.IsEdns0().SetVersion(1)
	seeds = append(seeds, edns)
	for _, m := range seeds {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0, 1, 2})

	up := startUpstream(f, answerA)
	s := newServer(f, Config{Upstreams: []string{up.addr}})
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(dns.Msg)
		if err := req.Unpack(b); err != nil {
			return // the server drops what does not parse (or answers FORMERR from the header)
		}
		for _, udp := range []bool{true, false} {
			m := ask(t, s, req.Copy(), udp) // checks the UDP size
			if m == nil {
				if !req.Response {
					t.Fatalf("no answer to %v", req)
				}
				continue
			}
			if m.Id != req.Id {
				t.Errorf("id %d, want %d", m.Id, req.Id)
			}
			if m.IsEdns0() != nil && req.IsEdns0() == nil {
				t.Errorf("OPT in the answer to a query without: %v", m)
			}
		}
	})
}
