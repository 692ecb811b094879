package dnsresolve

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service"
)

// TestCompactMatchesNodes asks the same questions of an Index that makes a
// ClusterIP Service's records when asked and of one that built them ahead,
// and wants the same answers: every name the second holds, the SRV names, in
// lower and mixed case, for every type, and names that do not exist.
func TestCompactMatchesNodes(t *testing.T) {
	snap := testSnapshot(t)
	// A ClusterIP that is also a headless endpoint's address: two PTRs at
	// one reverse name, whichever comes first.
	clash := newService("default", "clash", "198.19.0.1")
	addPort(clash, "http", service.TCP, 80)
	clash2 := newService("a", "clash", "198.19.4.1")
	none := newService("default", "noaddr") // a ClusterIP not allocated yet
	addPort(none, "http", service.TCP, 80)
	// Endpoints of ClusterIP Services have names and PTRs too; one address
	// in two Services, one a headless endpoint's as well, one not ready.
	withEps := newService("default", "api", "198.18.0.30")
	addPort(withEps, "http", service.TCP, 80,
		ep("198.19.5.1:8080", "api-0", true), ep("198.19.5.2:8080", "", true),
		ep("198.19.0.1:8080", "", true), ep("198.19.5.3:8080", "api-2", false))
	withEps2 := newService("other", "api", "198.18.1.30")
	addPort(withEps2, "http", service.TCP, 80, ep("198.19.5.1:8080", "api-0", true))
	snap = service.NewSnapshot(append(slices.Clone(snap.Services()), clash, clash2, none, withEps, withEps2), nil)
	cfg := IndexConfig{Zone: "cluster.local", TTL: 5, Serial: 1, NSAddrs: []netip.Addr{netip.MustParseAddr("198.18.0.53")}}
	compact, eager := NewIndex(snap, cfg), newIndex(snap, cfg, true)

	names := map[string]bool{"nope.default.svc.cluster.local.": true, "_http._tcp.nope.default.svc.cluster.local.": true,
		"_tcp.web.default.svc.cluster.local.": true, "_udp.single.default.svc.cluster.local.": true, "_tcp.single.default.svc.cluster.local.": true,
		"_x._y.web.default.svc.cluster.local.": true, "_http.web.default.svc.cluster.local.": true,
		"sub.web.default.svc.cluster.local.": true, "_http._tcp.10.0.18.198.in-addr.arpa.": true,
		"api-2.api.default.svc.cluster.local.": true, "x.api-0.api.default.svc.cluster.local.": true}
	for name := range eager.names {
		names[name] = true
	}
	compacted := 0
	for name, e := range compact.names {
		if e.n == nil {
			compacted++
		}
		if _, ok := eager.names[name]; !ok {
			t.Errorf("%s: in the compact Index only", name)
		}
	}
	if compacted == 0 {
		t.Fatal("no name is held compactly")
	}
	types := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR, dns.TypeANY, dns.TypeTXT, dns.TypeNS, dns.TypeCNAME, dns.TypeSOA, dns.TypeMX}
	for name := range names {
		for _, q := range []string{name, mixedCase(name)} {
			for _, qt := range types {
				got, gotOK := compact.Lookup(q, qt)
				want, wantOK := eager.Lookup(q, qt)
				if gotOK != wantOK || got.Rcode != want.Rcode || !sameRRs(got.Answer, want.Answer) ||
					!sameRRs(got.Ns, want.Ns) || !sameRRs(got.Extra, want.Extra) {
					t.Errorf("%s %s: compact %v %+v, built ahead %v %+v", q, dns.TypeToString[qt], gotOK, got, wantOK, want)
				}
			}
		}
	}
}

// mixedCase upper-cases every other letter, as a DNS 0x20 resolver might.
func mixedCase(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); i += 2 {
		if b[i] >= 'a' && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}

func sameRRs(a, b []dns.RR) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Compare(a[i].String(), b[i].String()) != 0 {
			return false
		}
	}
	return true
}
