package dnsresolve

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service"
)

// testSnapshot holds one Service of every kind the specification names.
func testSnapshot(t testing.TB) *service.Snapshot {
	t.Helper()
	web := newService("default", "web", "198.18.0.10", "fd00::a")
	addPort(web, "http", service.TCP, 80)
	addPort(web, "dns", service.UDP, 53)
	addPort(web, "dns", service.TCP, 53)

	single := newService("default", "single", "198.18.0.11")
	addPort(single, "", service.TCP, 8080)

	db := newService("default", "db")
	db.Headless = true
	addPort(db, "pg", service.TCP, 5432,
		ep("198.19.0.1:5432", "db-0", true),
		ep("198.19.0.2:5432", "db-1", true),
		ep("198.19.0.3:5432", "", true),
		ep("[fd00::19:5]:5432", "db-5", true),
		ep("198.19.0.4:5432", "db-3", false))
	addPort(db, "metrics", service.TCP, 9187, ep("198.19.0.1:9187", "db-0", true))

	all := newService("default", "all")
	all.Headless, all.PublishNotReadyAddresses = true, true
	addPort(all, "peer", service.SCTP, 7000, ep("198.19.1.4:7000", "x", false))

	// A headless Service without ports (allowed by the API) still has A records.
	bare := newService("default", "bare")
	bare.Headless = true
	bare.Endpoints = []service.Endpoint{ep("198.19.2.1:0", "bare-0", true)}

	ext := newService("default", "ext")
	ext.Type, ext.ExternalName = service.TypeExternalName, "example.org"

	otherWeb := newService("other", "web", "198.18.1.10")
	addPort(otherWeb, "http", service.TCP, 8080)

	v6 := newService("kube-system", "v6", "fd00::53")

	// A StatefulSet pod of a dual-stack headless Service: one hostname, two
	// addresses, so one SRV target.
	dual := newService("default", "dual")
	dual.Headless = true
	addPort(dual, "web", service.TCP, 80,
		ep("198.19.3.1:80", "web-0", true),
		ep("[2001:db8:19::3:1]:80", "web-0", true))

	// Pods without hostnames (a Deployment behind a headless Service).
	anon := newService("default", "anon")
	anon.Headless = true
	addPort(anon, "", service.UDP, 9000,
		ep("198.19.4.1:9000", "", true),
		ep("[2001:db8:19::4:1]:9000", "", true))

	// No ready endpoint: spec 2.4.1 says NXDOMAIN.
	empty := newService("default", "empty")
	empty.Headless = true
	addPort(empty, "http", service.TCP, 80, ep("198.19.5.1:80", "e-0", false))

	// The API accepts an absolute externalName (one trailing dot).
	abs := newService("default", "abs")
	abs.Type, abs.ExternalName = service.TypeExternalName, "svc1.testns.svc.cluster.local."
	return service.NewSnapshot([]*service.Service{web, single, db, all, bare, ext, otherWeb, v6, dual, anon, empty, abs}, nil)
}

func newService(ns, name string, ips ...string) *service.Service {
	s := &service.Service{NamespacedName: service.NamespacedName{Namespace: ns, Name: name}, Type: service.TypeClusterIP}
	for _, ip := range ips {
		s.ClusterIPs = append(s.ClusterIPs, netip.MustParseAddr(ip))
	}
	return s
}

func addPort(s *service.Service, name string, proto service.Protocol, port uint16, eps ...service.Endpoint) {
	s.Ports = append(s.Ports, &service.Port{
		Name:      service.PortName{NamespacedName: s.NamespacedName, Port: name, Protocol: proto},
		Service:   s,
		Port:      port,
		Protocol:  proto,
		Endpoints: eps,
	})
	// Service.Endpoints holds each address once, as service.Build makes it.
	for _, e := range eps {
		if !slices.ContainsFunc(s.Endpoints, func(have service.Endpoint) bool { return have.Addr.Addr() == e.Addr.Addr() }) {
			e.Addr = netip.AddrPortFrom(e.Addr.Addr(), 0)
			s.Endpoints = append(s.Endpoints, e)
		}
	}
}

func ep(addr, hostname string, ready bool) service.Endpoint {
	return service.Endpoint{Addr: netip.MustParseAddrPort(addr), Hostname: hostname, Ready: ready, Serving: ready}
}

const testSOA = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"

func TestIndexLookup(t *testing.T) {
	ix := NewIndex(testSnapshot(t), IndexConfig{Zone: "cluster.local", TTL: 5, Serial: 1,
		NSAddrs: []netip.Addr{netip.MustParseAddr("198.18.0.53"), netip.MustParseAddr("2001:db8:18::53")}})
	tests := []struct {
		name   string
		qname  string
		qtype  uint16
		rcode  int
		answer []string
		ns     []string
		extra  []string
	}{
		{name: "schema version", qname: "dns-version.cluster.local.", qtype: dns.TypeTXT,
			answer: []string{`dns-version.cluster.local. 28800 IN TXT "1.1.0"`}},
		{name: "zone SOA", qname: "cluster.local.", qtype: dns.TypeSOA, answer: []string{testSOA}},
		{name: "clusterIP A", qname: "web.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"web.default.svc.cluster.local. 5 IN A 198.18.0.10"}},
		{name: "clusterIP AAAA", qname: "web.default.svc.cluster.local.", qtype: dns.TypeAAAA,
			answer: []string{"web.default.svc.cluster.local. 5 IN AAAA fd00::a"}},
		{name: "same name other namespace", qname: "web.other.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"web.other.svc.cluster.local. 5 IN A 198.18.1.10"}},
		{name: "ipv6-only service has no A", qname: "v6.kube-system.svc.cluster.local.", qtype: dns.TypeA,
			ns: []string{testSOA}},
		{name: "ipv6-only AAAA", qname: "v6.kube-system.svc.cluster.local.", qtype: dns.TypeAAAA,
			answer: []string{"v6.kube-system.svc.cluster.local. 5 IN AAAA fd00::53"}},
		{name: "clusterIP SRV tcp", qname: "_http._tcp.web.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"_http._tcp.web.default.svc.cluster.local. 5 IN SRV 0 100 80 web.default.svc.cluster.local."},
			extra:  []string{"web.default.svc.cluster.local. 5 IN A 198.18.0.10", "web.default.svc.cluster.local. 5 IN AAAA fd00::a"}},
		{name: "clusterIP SRV udp", qname: "_dns._udp.web.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"_dns._udp.web.default.svc.cluster.local. 5 IN SRV 0 100 53 web.default.svc.cluster.local."},
			extra:  []string{"web.default.svc.cluster.local. 5 IN A 198.18.0.10", "web.default.svc.cluster.local. 5 IN AAAA fd00::a"}},
		{name: "unnamed port has no SRV", qname: "_tcp.single.default.svc.cluster.local.", qtype: dns.TypeSRV,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "SRV of unknown port", qname: "_nope._tcp.web.default.svc.cluster.local.", qtype: dns.TypeSRV,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "clusterIP PTR v4", qname: "10.0.18.198.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"10.0.18.198.in-addr.arpa. 5 IN PTR web.default.svc.cluster.local."}},
		{name: "clusterIP PTR v6 nibbles", qname: "a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", qtype: dns.TypePTR,
			answer: []string{"a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa. 5 IN PTR web.default.svc.cluster.local."}},
		{name: "headless without ports", qname: "bare.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"bare.default.svc.cluster.local. 5 IN A 198.19.2.1"}},
		{name: "headless without ports: hostname", qname: "bare-0.bare.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"bare-0.bare.default.svc.cluster.local. 5 IN A 198.19.2.1"}},
		{name: "headless A: ready endpoints only", qname: "db.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{
				"db.default.svc.cluster.local. 5 IN A 198.19.0.1",
				"db.default.svc.cluster.local. 5 IN A 198.19.0.2",
				"db.default.svc.cluster.local. 5 IN A 198.19.0.3",
			}},
		{name: "headless AAAA", qname: "db.default.svc.cluster.local.", qtype: dns.TypeAAAA,
			answer: []string{"db.default.svc.cluster.local. 5 IN AAAA fd00::19:5"}},
		{name: "headless hostname", qname: "db-1.db.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"db-1.db.default.svc.cluster.local. 5 IN A 198.19.0.2"}},
		{name: "not-ready hostname unpublished", qname: "db-3.db.default.svc.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "headless SRV per ready endpoint", qname: "_pg._tcp.db.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{
				"_pg._tcp.db.default.svc.cluster.local. 5 IN SRV 0 25 5432 db-0.db.default.svc.cluster.local.",
				"_pg._tcp.db.default.svc.cluster.local. 5 IN SRV 0 25 5432 db-1.db.default.svc.cluster.local.",
				"_pg._tcp.db.default.svc.cluster.local. 5 IN SRV 0 25 5432 198-19-0-3.db.default.svc.cluster.local.",
				"_pg._tcp.db.default.svc.cluster.local. 5 IN SRV 0 25 5432 db-5.db.default.svc.cluster.local.",
			},
			extra: []string{
				"db-0.db.default.svc.cluster.local. 5 IN A 198.19.0.1",
				"db-1.db.default.svc.cluster.local. 5 IN A 198.19.0.2",
				"198-19-0-3.db.default.svc.cluster.local. 5 IN A 198.19.0.3",
				"db-5.db.default.svc.cluster.local. 5 IN AAAA fd00::19:5",
			}},
		{name: "headless endpoint without hostname: dashed name", qname: "198-19-0-3.db.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"198-19-0-3.db.default.svc.cluster.local. 5 IN A 198.19.0.3"}},
		{name: "dashed name PTR", qname: "3.0.19.198.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"3.0.19.198.in-addr.arpa. 5 IN PTR 198-19-0-3.db.default.svc.cluster.local."}},
		{name: "dashed IPv6 name", qname: "2001-db8-19--4-1.anon.default.svc.cluster.local.", qtype: dns.TypeAAAA,
			answer: []string{"2001-db8-19--4-1.anon.default.svc.cluster.local. 5 IN AAAA 2001:db8:19::4:1"}},
		{name: "dashed IPv6 name PTR", qname: "1.0.0.0.4.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.9.1.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", qtype: dns.TypePTR,
			answer: []string{"1.0.0.0.4.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.9.1.0.0.8.b.d.0.1.0.0.2.ip6.arpa. 5 IN PTR 2001-db8-19--4-1.anon.default.svc.cluster.local."}},
		{name: "headless SRV at the bare name, unnamed port", qname: "anon.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{
				"anon.default.svc.cluster.local. 5 IN SRV 0 50 9000 198-19-4-1.anon.default.svc.cluster.local.",
				"anon.default.svc.cluster.local. 5 IN SRV 0 50 9000 2001-db8-19--4-1.anon.default.svc.cluster.local.",
			},
			extra: []string{
				"198-19-4-1.anon.default.svc.cluster.local. 5 IN A 198.19.4.1",
				"2001-db8-19--4-1.anon.default.svc.cluster.local. 5 IN AAAA 2001:db8:19::4:1",
			}},
		{name: "dual-stack pod: one SRV target", qname: "_web._tcp.dual.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"_web._tcp.dual.default.svc.cluster.local. 5 IN SRV 0 100 80 web-0.dual.default.svc.cluster.local."},
			extra: []string{
				"web-0.dual.default.svc.cluster.local. 5 IN A 198.19.3.1",
				"web-0.dual.default.svc.cluster.local. 5 IN AAAA 2001:db8:19::3:1",
			}},
		{name: "dual-stack pod: bare-name SRV too", qname: "dual.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"dual.default.svc.cluster.local. 5 IN SRV 0 100 80 web-0.dual.default.svc.cluster.local."},
			extra: []string{
				"web-0.dual.default.svc.cluster.local. 5 IN A 198.19.3.1",
				"web-0.dual.default.svc.cluster.local. 5 IN AAAA 2001:db8:19::3:1",
			}},
		{name: "headless without ready endpoints: NXDOMAIN", qname: "empty.default.svc.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "headless without ready endpoints: SRV NXDOMAIN", qname: "_http._tcp.empty.default.svc.cluster.local.", qtype: dns.TypeSRV,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "headless without ready endpoints: hostname NXDOMAIN", qname: "e-0.empty.default.svc.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "clusterIP SRV at the bare name: every port once", qname: "web.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{
				"web.default.svc.cluster.local. 5 IN SRV 0 50 80 web.default.svc.cluster.local.",
				"web.default.svc.cluster.local. 5 IN SRV 0 50 53 web.default.svc.cluster.local.",
			},
			extra: []string{"web.default.svc.cluster.local. 5 IN A 198.18.0.10", "web.default.svc.cluster.local. 5 IN AAAA fd00::a"}},
		{name: "bare-name SRV of an unnamed port", qname: "single.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"single.default.svc.cluster.local. 5 IN SRV 0 100 8080 single.default.svc.cluster.local."},
			extra:  []string{"single.default.svc.cluster.local. 5 IN A 198.18.0.11"}},
		{name: "ExternalName with a trailing dot", qname: "abs.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"abs.default.svc.cluster.local. 5 IN CNAME svc1.testns.svc.cluster.local."}},
		{name: "zone apex NS", qname: "cluster.local.", qtype: dns.TypeNS,
			answer: []string{"cluster.local. 5 IN NS ns.dns.cluster.local."},
			extra:  []string{"ns.dns.cluster.local. 5 IN A 198.18.0.53", "ns.dns.cluster.local. 5 IN AAAA 2001:db8:18::53"}},
		{name: "the name server's address", qname: "ns.dns.cluster.local.", qtype: dns.TypeA,
			answer: []string{"ns.dns.cluster.local. 5 IN A 198.18.0.53"}},
		{name: "pods insecure: A", qname: "198-19-0-9.default.pod.cluster.local.", qtype: dns.TypeA,
			answer: []string{"198-19-0-9.default.pod.cluster.local. 5 IN A 198.19.0.9"}},
		{name: "pods insecure: AAAA", qname: "2001-db8-19--9.kube-system.pod.cluster.local.", qtype: dns.TypeAAAA,
			answer: []string{"2001-db8-19--9.kube-system.pod.cluster.local. 5 IN AAAA 2001:db8:19::9"}},
		{name: "pods insecure: other type NODATA", qname: "198-19-0-9.default.pod.cluster.local.", qtype: dns.TypeAAAA,
			ns: []string{testSOA}},
		{name: "pods insecure: not an address", qname: "web.default.pod.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "pods insecure: namespace NODATA", qname: "default.pod.cluster.local.", qtype: dns.TypeA,
			ns: []string{testSOA}},
		{name: "pods insecure: too deep", qname: "a.198-19-0-9.default.pod.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "headless SRV on the endpoint's port", qname: "_metrics._tcp.db.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"_metrics._tcp.db.default.svc.cluster.local. 5 IN SRV 0 100 9187 db-0.db.default.svc.cluster.local."},
			extra:  []string{"db-0.db.default.svc.cluster.local. 5 IN A 198.19.0.1"}},
		{name: "headless PTR", qname: "2.0.19.198.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"2.0.19.198.in-addr.arpa. 5 IN PTR db-1.db.default.svc.cluster.local."}},
		{name: "publishNotReadyAddresses", qname: "x.all.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"x.all.default.svc.cluster.local. 5 IN A 198.19.1.4"}},
		{name: "SCTP SRV", qname: "_peer._sctp.all.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"_peer._sctp.all.default.svc.cluster.local. 5 IN SRV 0 100 7000 x.all.default.svc.cluster.local."},
			extra:  []string{"x.all.default.svc.cluster.local. 5 IN A 198.19.1.4"}},
		{name: "ExternalName CNAME", qname: "ext.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"ext.default.svc.cluster.local. 5 IN CNAME example.org."}},
		{name: "ExternalName CNAME query", qname: "ext.default.svc.cluster.local.", qtype: dns.TypeCNAME,
			answer: []string{"ext.default.svc.cluster.local. 5 IN CNAME example.org."}},
		{name: "case-insensitive, answered in the question's case", qname: "WEB.Default.SVC.cluster.LOCAL.", qtype: dns.TypeA,
			answer: []string{"WEB.Default.SVC.cluster.LOCAL. 5 IN A 198.18.0.10"}},
		{name: "unqualified name", qname: "web.default.svc.cluster.local", qtype: dns.TypeA,
			answer: []string{"web.default.svc.cluster.local. 5 IN A 198.18.0.10"}},
		{name: "ANY", qname: "web.default.svc.cluster.local.", qtype: dns.TypeANY,
			answer: []string{"web.default.svc.cluster.local. 5 IN A 198.18.0.10", "web.default.svc.cluster.local. 5 IN AAAA fd00::a",
				"web.default.svc.cluster.local. 5 IN SRV 0 50 80 web.default.svc.cluster.local.",
				"web.default.svc.cluster.local. 5 IN SRV 0 50 53 web.default.svc.cluster.local."}},
		{name: "NODATA: existing name, no such type", qname: "web.default.svc.cluster.local.", qtype: dns.TypeTXT,
			ns: []string{testSOA}},
		{name: "NODATA: empty non-terminal namespace", qname: "default.svc.cluster.local.", qtype: dns.TypeA,
			ns: []string{testSOA}},
		{name: "NODATA: svc", qname: "svc.cluster.local.", qtype: dns.TypeA, ns: []string{testSOA}},
		{name: "NXDOMAIN: no such service", qname: "nope.default.svc.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "NXDOMAIN: no such namespace", qname: "web.nope.svc.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "NXDOMAIN: below a service", qname: "a.b.web.default.svc.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
		{name: "NXDOMAIN: search-path expansion", qname: "web.default.svc.cluster.local.default.svc.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ns: []string{testSOA}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := ix.Lookup(tt.qname, tt.qtype)
			if !ok {
				t.Fatalf("Lookup(%s): not authoritative", tt.qname)
			}
			logAnswer(t, tt.qname, tt.qtype, r)
			if r.Rcode != tt.rcode {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode])
			}
			assertRRs(t, "answer", r.Answer, tt.answer)
			assertRRs(t, "authority", r.Ns, tt.ns)
			assertRRs(t, "additional", r.Extra, tt.extra)
		})
	}
}

// logAnswer logs a question and its answer in zone-file syntax, as dig prints
// them, so that go test -v reads as a list of lookups.
func logAnswer(t *testing.T, qname string, qtype uint16, r Result) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s -> %s", qname, dns.TypeToString[qtype], dns.RcodeToString[r.Rcode])
	for _, sec := range []struct {
		name string
		rrs  []dns.RR
	}{{"answer", r.Answer}, {"authority", r.Ns}, {"additional", r.Extra}} {
		for _, rr := range sec.rrs {
			fmt.Fprintf(&b, "\n  %-10s %s", sec.name, strings.ReplaceAll(rr.String(), "\t", " "))
		}
	}
	t.Log(b.String())
}

func TestIndexPodsDisabled(t *testing.T) {
	ix := NewIndex(testSnapshot(t), IndexConfig{Zone: "cluster.local", TTL: 5, Serial: 1, Pods: PodsDisabled})
	for _, name := range []string{"198-19-0-9.default.pod.cluster.local.", "default.pod.cluster.local."} {
		if r, ok := ix.Lookup(name, dns.TypeA); !ok || r.Rcode != dns.RcodeNameError {
			t.Errorf("Lookup(%s) = %v %v, want NXDOMAIN", name, r.Rcode, ok)
		}
	}
	// The pod zone's apex exists whatever the mode, as in CoreDNS.
	if r, ok := ix.Lookup("pod.cluster.local.", dns.TypeA); !ok || r.Rcode != dns.RcodeSuccess || len(r.Answer) > 0 {
		t.Errorf("Lookup(pod.cluster.local.) = %v %v, want NODATA", r, ok)
	}
}

func TestEndpointName(t *testing.T) {
	for _, tt := range []struct{ addr, hostname, want string }{
		{"172.0.0.2:80", "", "172-0-0-2"},
		{"[5678:abcd::1]:80", "", "5678-abcd--1"}, // the specification's example
		{"[::ffff:198.19.0.1]:80", "", "198-19-0-1"},
		{"198.19.0.1:80", "Web-0", "web-0"},
	} {
		if got := endpointName(ep(tt.addr, tt.hostname, true)); got != tt.want {
			t.Errorf("endpointName(%s, %q) = %q, want %q", tt.addr, tt.hostname, got, tt.want)
		}
	}
}

func TestIndexNotOurs(t *testing.T) {
	ix := NewIndex(testSnapshot(t), IndexConfig{Zone: "cluster.local", TTL: 5, Serial: 1})
	for _, name := range []string{
		"example.org.",
		"local.",
		"cluster.local.example.org.",
		"arpa.",
	} {
		if r, ok := ix.Lookup(name, dns.TypeA); ok {
			t.Errorf("Lookup(%s) = %v, want not authoritative", name, r)
		}
	}
}

// TestIndexReverseZones: the reverse zones are the Index's, each with its own
// SOA; a reverse name of no Service is NXDOMAIN there (whether it falls
// through to the upstreams is the Server's to say). Without reverse zones,
// no reverse name is the Index's.
func TestIndexReverseZones(t *testing.T) {
	ix := NewIndex(testSnapshot(t), IndexConfig{Zone: "cluster.local", TTL: 5, Serial: 1})
	r, ok := ix.Lookup("99.0.18.198.in-addr.arpa.", dns.TypePTR)
	if !ok || r.Rcode != dns.RcodeNameError {
		t.Fatalf("a reverse name of no Service: %v %v, want NXDOMAIN", r, ok)
	}
	assertRRs(t, "authority", r.Ns, []string{"in-addr.arpa. 5 IN SOA ns.dns.in-addr.arpa. hostmaster.in-addr.arpa. 1 7200 1800 86400 5"})
	r, _ = ix.Lookup("in-addr.arpa.", dns.TypeSOA)
	assertRRs(t, "answer", r.Answer, []string{"in-addr.arpa. 5 IN SOA ns.dns.in-addr.arpa. hostmaster.in-addr.arpa. 1 7200 1800 86400 5"})
	r, _ = ix.Lookup("10.0.18.198.in-addr.arpa.", dns.TypePTR)
	assertRRs(t, "answer", r.Answer, []string{"10.0.18.198.in-addr.arpa. 5 IN PTR web.default.svc.cluster.local."})

	narrow := NewIndex(testSnapshot(t), IndexConfig{Zone: "cluster.local", TTL: 5, Serial: 1, ReverseZones: []string{"18.198.in-addr.arpa"}})
	if r, ok := narrow.Lookup("1.0.19.198.in-addr.arpa.", dns.TypePTR); ok {
		t.Errorf("outside the reverse zone 18.198.in-addr.arpa: %v, want not the Index's", r)
	}
	r, _ = narrow.Lookup("99.0.18.198.in-addr.arpa.", dns.TypePTR)
	assertRRs(t, "authority", r.Ns, []string{"18.198.in-addr.arpa. 5 IN SOA ns.dns.18.198.in-addr.arpa. hostmaster.18.198.in-addr.arpa. 1 7200 1800 86400 5"})

	none := NewIndex(testSnapshot(t), IndexConfig{Zone: "cluster.local", TTL: 5, Serial: 1, ReverseZones: []string{}})
	if r, ok := none.Lookup("10.0.18.198.in-addr.arpa.", dns.TypePTR); ok {
		t.Errorf("without reverse zones: %v, want not the Index's", r)
	}
}

func TestIndexOtherZone(t *testing.T) {
	ix := NewIndex(testSnapshot(t), IndexConfig{Zone: "Corp.Example.", TTL: 30, Serial: 7})
	r, ok := ix.Lookup("web.default.svc.corp.example.", dns.TypeA)
	if !ok {
		t.Fatal("not authoritative for the configured zone")
	}
	assertRRs(t, "answer", r.Answer, []string{"web.default.svc.corp.example. 30 IN A 198.18.0.10"})
	if _, ok := ix.Lookup("web.default.svc.cluster.local.", dns.TypeA); ok {
		t.Error("authoritative for cluster.local with zone corp.example")
	}
}

func TestIndexEmpty(t *testing.T) {
	ix := NewIndex(nil, IndexConfig{TTL: 5, Serial: 1})
	r, ok := ix.Lookup("web.default.svc.cluster.local.", dns.TypeA)
	if !ok || r.Rcode != dns.RcodeNameError {
		t.Fatalf("Lookup in an empty zone = %v %v, want NXDOMAIN", r, ok)
	}
	r, _ = ix.Lookup("dns-version.cluster.local.", dns.TypeTXT)
	assertRRs(t, "answer", r.Answer, []string{`dns-version.cluster.local. 28800 IN TXT "1.1.0"`})
}

// assertRRs compares records with the expected ones written in zone-file
// syntax, ignoring order.
func assertRRs(t *testing.T, section string, got []dns.RR, want []string) {
	t.Helper()
	var g, w []string
	for _, rr := range got {
		g = append(g, rr.String())
	}
	for _, s := range want {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("bad expected record %q: %v", s, err)
		}
		w = append(w, rr.String())
	}
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		t.Errorf("%s:\n got: %q\nwant: %q", section, g, w)
	}
}
