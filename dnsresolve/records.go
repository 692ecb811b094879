package dnsresolve

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service"
)

// This file holds the record forms of the specification, one function each.
// Every name is built lower-case; Lookup spells answers as the question did.

// schemaVersionTTL is the TTL of dns-version.<zone> (CoreDNS's kubernetes.go).
const schemaVersionTTL = 28800

// apex adds the zone's own records: the SOA, the NS that the SOA names
// (ns.dns.<zone>, as CoreDNS's kubernetes plugin calls itself) with that
// name's addresses, and the dns-version TXT of spec 2.2.
func (b *builder) apex(zone string, nsAddrs []netip.Addr) {
	b.add(zone, b.ix.soa)
	nsName := b.ix.soa.Ns
	b.add(zone, &dns.NS{Hdr: b.hdr(zone, dns.TypeNS), Ns: nsName})
	var glue []dns.RR
	for _, ip := range nsAddrs {
		glue = append(glue, b.addr(nsName, ip))
	}
	b.node(zone).extra = glue
	// CoreDNS gives it a TTL of its own, eight hours, whatever the ttl option.
	txt := &dns.TXT{Hdr: b.hdr("dns-version."+zone, dns.TypeTXT), Txt: []string{SchemaVersion}}
	txt.Hdr.Ttl = schemaVersionTTL
	b.add("dns-version."+zone, txt)
}

// service adds the records of one Service at <svc>.<ns>.svc.<zone>. The
// namespace exists (NODATA, not NXDOMAIN) as soon as one of its Services does.
func (b *builder) service(svc *service.Service) {
	base := serviceName(svc, b.ix.zone)
	if i, _ := dns.NextLabel(base, 0); i > 0 {
		b.node(base[i:])
	}
	switch {
	case svc.ExternalName != "":
		b.externalName(base, svc.ExternalName)
	case svc.Headless:
		b.headless(svc, base)
	default:
		b.clusterIP(svc, base)
	}
}

// externalName is spec 2.5: <svc>.<ns>.svc.<zone>. <ttl> IN CNAME <extname>.
// The API accepts the name with one trailing dot or without; either way the
// target is fully qualified.
func (b *builder) externalName(base, target string) {
	n := b.node(base)
	n.rrs = []dns.RR{&dns.CNAME{Hdr: b.hdr(base, dns.TypeCNAME), Target: dns.Fqdn(strings.ToLower(target))}}
	n.cname = true
}

// clusterIP is spec 2.3: A/AAAA of each ClusterIP, SRV per named port with the
// Service's name as target (and its addresses as additional records), PTR of
// each ClusterIP back to the Service. The Service's own name also answers SRV
// with every port, as CoreDNS does. The Index keeps the Service at its name
// and at its reverse names and makes these records when asked (compact.go);
// a name that something else has too gets them built ahead (nodes).
//
// Its ready endpoints have names too, as CoreDNS gives every Service's
// endpoints: <hostname or dashed address>.<svc>.<ns>.svc.<zone> answers the
// endpoint's address (made when asked, compact.go's endpointName), and the
// endpoint's reverse name a PTR to it, when no ClusterIP has that address
// (CoreDNS's serviceRecordForIP looks at ClusterIPs first).
func (b *builder) clusterIP(svc *service.Service, base string) {
	if _, taken := b.ix.names[base]; taken || b.eager {
		b.nodes(svc, base, false)
	} else {
		b.ix.names[base] = entry{svc: svc}
	}
	for _, ip := range svc.ClusterIPs {
		rev, ok := b.reverseName(ip)
		if !ok {
			continue
		}
		if _, taken := b.ix.names[rev]; taken || b.eager {
			b.nodes(svc, rev, true)
		} else {
			b.ix.names[rev] = entry{svc: svc, ptr: true}
		}
	}
	for i, e := range svc.Endpoints {
		if !e.Ready && !svc.PublishNotReadyAddresses {
			continue
		}
		rev, ok := b.reverseName(e.Addr.Addr())
		if !ok {
			continue
		}
		en := entry{svc: svc, ptr: true, ep: int32(i + 1)}
		if _, taken := b.ix.names[rev]; taken || b.eager {
			b.materialize(en, rev)
		} else {
			b.ix.names[rev] = en
		}
	}
}

// materialize builds ahead the records a compact entry e stands for at name.
func (b *builder) materialize(e entry, name string) {
	if e.ep > 0 {
		target := endpointName(e.svc.Endpoints[e.ep-1]) + "." + serviceName(e.svc, b.ix.zone)
		if !b.hasPTR(name, target) {
			b.add(name, &dns.PTR{Hdr: b.hdr(name, dns.TypePTR), Ptr: target})
		}
		return
	}
	b.nodes(e.svc, name, e.ptr)
}

// hasPTR reports whether name has a PTR record to target already: two
// EndpointSlices of one Service may both hold an address.
func (b *builder) hasPTR(name, target string) bool {
	e, ok := b.ix.names[name]
	if !ok || e.n == nil {
		return false
	}
	for _, rr := range e.n.rrs {
		if p, ok := rr.(*dns.PTR); ok && p.Ptr == target {
			return true
		}
	}
	return false
}

// nodes builds ahead the records a ClusterIP Service has at name: with ptr,
// name is the reverse name of one of its ClusterIPs; without, its own name
// (and its SRV names below it).
func (b *builder) nodes(svc *service.Service, name string, ptr bool) {
	if ptr {
		b.add(name, &dns.PTR{Hdr: b.hdr(name, dns.TypePTR), Ptr: serviceName(svc, b.ix.zone)})
		return
	}
	b.node(name)                      // exists even without an address yet (NODATA)
	for _, e := range svc.Endpoints { // compact.go's endpointName, built ahead
		if e.Ready || svc.PublishNotReadyAddresses {
			b.addr(endpointName(e)+"."+name, e.Addr.Addr())
		}
	}
	var addrs []dns.RR
	for _, ip := range svc.ClusterIPs {
		addrs = append(addrs, b.addr(name, ip))
	}
	// Every SRV target is the Service's own name: its addresses are the
	// additional records of every set.
	var all srvSet
	for _, p := range svc.Ports {
		srv := srvTarget{target: name, port: p.Port}
		all.add(srv)
		if p.Name.Port != "" { // spec: SRV records exist for named ports only
			b.srvs(srvName(p, name), srvSet{srv}, addrs)
		}
	}
	b.srvs(name, all, addrs)
}

// serviceName is <svc>.<ns>.svc.<zone>, lower-case.
func serviceName(svc *service.Service, zone string) string {
	return strings.ToLower(svc.Name + "." + svc.Namespace + ".svc." + zone)
}

// headless is spec 2.4: an A/AAAA per published endpoint at the Service's
// name, and each such endpoint named <hostname>.<svc>.<ns>.svc.<zone> with its
// A/AAAA and PTR. An endpoint without a hostname is named by its address with
// dashes (spec 2.4.1's "unique, system-assigned identifier", in CoreDNS's form:
// 198-19-0-3, 2001-db8--1). SRV per named port and endpoint targets that name
// on the endpoint's own port (no proxy stands between client and pod).
//
// A headless Service with no published endpoint has no name at all: spec
// 2.4.1 says NXDOMAIN, and CoreDNS answers so.
func (b *builder) headless(svc *service.Service, base string) {
	published := func(e service.Endpoint) bool { return e.Ready || svc.PublishNotReadyAddresses }

	// Service.Endpoints has every endpoint address once, whatever the ports:
	// a headless Service may have no ports at all and still has A records.
	hostAddrs := make(map[string][]dns.RR)
	seenIP := make(map[netip.Addr]bool)
	for _, e := range svc.Endpoints {
		if !published(e) {
			continue
		}
		ip := e.Addr.Addr()
		if seenIP[ip] {
			continue
		}
		seenIP[ip] = true
		b.addr(base, ip)
		host := endpointName(e) + "." + base
		hostAddrs[host] = append(hostAddrs[host], b.addr(host, ip))
		if rev, ok := b.reverseName(ip); ok && !b.hasPTR(rev, host) {
			b.add(rev, &dns.PTR{Hdr: b.hdr(rev, dns.TypePTR), Ptr: host})
		}
	}
	if len(seenIP) == 0 {
		return
	}

	var all srvSet
	for _, p := range svc.Ports {
		var set srvSet
		for _, e := range p.Endpoints {
			if published(e) {
				set.add(srvTarget{target: endpointName(e) + "." + base, port: e.Addr.Port()})
			}
		}
		for _, s := range set {
			all.add(s)
		}
		if p.Name.Port != "" && len(set) > 0 {
			b.srvs(srvName(p, base), set, set.addrs(hostAddrs))
		}
	}
	b.srvs(base, all, all.addrs(hostAddrs))
}

// endpointName is the first label of a headless endpoint's name: its hostname,
// or its address with dashes (CoreDNS's endpointHostname).
func endpointName(e service.Endpoint) string {
	if e.Hostname != "" {
		return strings.ToLower(e.Hostname)
	}
	ip := e.Addr.Addr().Unmap().String()
	if strings.Contains(ip, ".") {
		return strings.ReplaceAll(ip, ".", "-")
	}
	return strings.ReplaceAll(ip, ":", "-")
}

// srvTarget is one SRV record's data before it gets its weight.
type srvTarget struct {
	target string
	port   uint16
}

// srvSet is a list of SRV targets without repeats: RFC 2181 section 5 forbids
// identical records in one RRset, and a dual-stack pod (one hostname, two
// addresses) or a port number served over TCP and UDP would make them.
type srvSet []srvTarget

func (s *srvSet) add(t srvTarget) {
	for _, have := range *s {
		if have == t {
			return
		}
	}
	*s = append(*s, t)
}

// addrs returns the addresses of the set's targets (from byName), each
// target's once.
func (s srvSet) addrs(byName map[string][]dns.RR) []dns.RR {
	var out []dns.RR
	seen := make(map[string]bool, len(s))
	for _, t := range s {
		if !seen[t.target] {
			seen[t.target] = true
			out = append(out, byName[t.target]...)
		}
	}
	return out
}

// srvs adds the SRV RRset set at name, with extra, the addresses of its
// targets, as additional records. CoreDNS spreads a weight of 100 over the
// records of one set.
func (b *builder) srvs(name string, set srvSet, extra []dns.RR) {
	if len(set) == 0 {
		return
	}
	n := b.node(name)
	weight := uint16(max(1, 100/len(set)))
	for _, s := range set {
		n.rrs = append(n.rrs, &dns.SRV{Hdr: b.hdr(name, dns.TypeSRV), Weight: weight, Port: s.port, Target: s.target})
	}
	n.extra = append(n.extra, extra...)
}

// srvName is _<port>._<proto>.<svc>.<ns>.svc.<zone>.
func srvName(p *service.Port, base string) string {
	return "_" + strings.ToLower(p.Name.Port) + "._" + strings.ToLower(string(p.Protocol)) + "." + base
}

// PodMode says how <address>.<namespace>.pod.<zone> is answered, as CoreDNS's
// "pods" option does.
type PodMode string

const (
	// PodsInsecure answers any such name with the address it spells, without
	// checking that a pod has it: CoreDNS's "pods insecure", kubeadm's default.
	PodsInsecure PodMode = "insecure"
	// PodsVerified answers only when a pod in that namespace has the address
	// (the Snapshot's PodIPs, from a Pod watch): CoreDNS's "pods verified".
	PodsVerified PodMode = "verified"
	// PodsDisabled answers NXDOMAIN for every name under pod.<zone> but the
	// apex: CoreDNS's "pods disabled", its default.
	PodsDisabled PodMode = "disabled"
)

// pod answers a question for a name under pod.<zone> (lname is lower-case),
// as CoreDNS's kubernetes plugin does (Records, findPods): pod.<zone> itself
// exists (NODATA); <ns>.pod.<zone> exists when the namespace does and pod
// names are not disabled; "1-2-3-4.ns.pod.<zone>" is 1.2.3.4 and
// "2001-db8--1.ns..." 2001:db8::1, with "pods verified" only when a pod in
// that namespace has the address. Anything else is NXDOMAIN.
func (ix *Index) pod(qname, lname string, qtype uint16) Result {
	nodata := Result{Ns: []dns.RR{ix.soa}}
	nxdomain := Result{Rcode: dns.RcodeNameError, Ns: []dns.RR{ix.soa}}
	labels := dns.SplitDomainName(strings.TrimSuffix(lname, ix.podZone))
	if len(labels) == 0 {
		return nodata
	}
	if len(labels) > 2 || ix.pods == PodsDisabled || !ix.exposed.has(labels[len(labels)-1]) {
		return nxdomain
	}
	if len(labels) == 1 {
		return nodata
	}
	ip, ok := podAddr(labels[0])
	if !ok || (ix.pods == PodsVerified && !ix.podIPs.Has(ip, labels[1])) {
		return nxdomain
	}
	rr := addrRR(dns.RR_Header{Name: qname, Class: dns.ClassINET, Ttl: ix.ttl}, ip)
	if qtype != rr.Header().Rrtype && qtype != dns.TypeANY {
		return nodata
	}
	return Result{Answer: []dns.RR{rr}}
}

// podAddr reads the address a pod name's first label spells, as CoreDNS does:
// three dashes and no "--" is IPv4, anything else IPv6.
func podAddr(label string) (netip.Addr, bool) {
	var s string
	if strings.Count(label, "-") == 3 && !strings.Contains(label, "--") {
		s = strings.ReplaceAll(label, "-", ".")
	} else {
		s = strings.ReplaceAll(label, "-", ":")
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip, true
}
