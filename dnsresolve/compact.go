package dnsresolve

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service"
)

// This file answers the names of ClusterIP Services from the Service itself:
// the same records records.go's nodes builds ahead (spec 2.3), made when a
// question asks for them. An Index keeps about 250 bytes per such Service
// (its two names and the map's slots) instead of about 900 for its records,
// and builds in a third of the time (BenchmarkNewIndex). The records are
// made once per name and type asked: the answer is then kept encoded
// (wire.go).

// compact answers a question for a name whose entry holds a ClusterIP
// Service: its own name, or (e.ptr) the reverse name of one of its ClusterIPs.
// lname is qname in lower case.
func (ix *Index) compact(e entry, qname, lname string, qtype uint16) Result {
	if e.ptr {
		if qtype != dns.TypePTR && qtype != dns.TypeANY {
			return Result{Ns: []dns.RR{ix.soaOf(lname)}}
		}
		target := serviceName(e.svc, ix.zone)
		if e.ep > 0 {
			target = endpointName(e.svc.Endpoints[e.ep-1]) + "." + target
		}
		return Result{Answer: []dns.RR{&dns.PTR{Hdr: ix.hdr(qname, dns.TypePTR), Ptr: target}}}
	}
	svc := e.svc
	var r Result
	if qtype == dns.TypeA || qtype == dns.TypeAAAA || qtype == dns.TypeANY {
		for _, ip := range svc.ClusterIPs {
			if rr := ix.addrRR(qname, ip); qtype == dns.TypeANY || rr.Header().Rrtype == qtype {
				r.Answer = append(r.Answer, rr)
			}
		}
	}
	if qtype == dns.TypeSRV || qtype == dns.TypeANY {
		// Every port, each port number once (RFC 2181 5: no identical
		// records), as nodes builds the set.
		var all srvSet
		for _, p := range svc.Ports {
			all.add(srvTarget{target: lname, port: p.Port})
		}
		weight := uint16(max(1, 100/max(1, len(all))))
		for _, t := range all {
			r.Answer = append(r.Answer, &dns.SRV{Hdr: ix.hdr(qname, dns.TypeSRV), Weight: weight, Port: t.port, Target: t.target})
		}
		if qtype == dns.TypeSRV && len(all) > 0 {
			r.Extra = ix.addrs(lname, svc)
		}
	}
	if len(r.Answer) == 0 {
		return Result{Ns: []dns.RR{ix.soa}}
	}
	return r
}

// srvName answers a question for _<port>._<proto>.<svc>.<ns>.svc.<zone>, or
// for the empty non-terminal _<proto>.<svc>..., when <svc>... is a ClusterIP
// Service's name held compactly. ok is false for any other name.
func (ix *Index) srvName(qname, lname string, qtype uint16) (r Result, ok bool) {
	if !strings.HasPrefix(lname, "_") {
		return Result{}, false
	}
	i, _ := dns.NextLabel(lname, 0)
	first, rest := lname[1:i-1], lname[i:]
	if e, found := ix.names[rest]; found && e.n == nil && !e.ptr {
		// _<proto>.<svc>...: exists when a named port has that protocol.
		for _, p := range e.svc.Ports {
			if p.Name.Port != "" && strings.EqualFold(string(p.Protocol), first) {
				return Result{Ns: []dns.RR{ix.soa}}, true
			}
		}
		return Result{}, false
	}
	if !strings.HasPrefix(rest, "_") {
		return Result{}, false
	}
	j, _ := dns.NextLabel(rest, 0)
	proto, base := rest[1:j-1], rest[j:]
	e, found := ix.names[base]
	if !found || e.n != nil || e.ptr {
		return Result{}, false
	}
	for _, p := range e.svc.Ports {
		if p.Name.Port == "" || !strings.EqualFold(p.Name.Port, first) || !strings.EqualFold(string(p.Protocol), proto) {
			continue
		}
		if qtype != dns.TypeSRV && qtype != dns.TypeANY {
			return Result{Ns: []dns.RR{ix.soa}}, true
		}
		r.Answer = []dns.RR{&dns.SRV{Hdr: ix.hdr(qname, dns.TypeSRV), Weight: 100, Port: p.Port, Target: base}}
		if qtype == dns.TypeSRV {
			r.Extra = ix.addrs(base, e.svc)
		}
		return r, true
	}
	return Result{}, false
}

// endpointName answers a question for <endpoint>.<svc>.<ns>.svc.<zone> when
// <svc>... is a ClusterIP Service's name held compactly: the A or AAAA of the
// ready endpoints that <endpoint> names (hostname, or dashed address), as
// CoreDNS's findServices answers an endpoint of any Service. ok is false for
// any other name.
func (ix *Index) endpointName(qname, lname string, qtype uint16) (r Result, ok bool) {
	i, end := dns.NextLabel(lname, 0)
	if end {
		return Result{}, false
	}
	e, found := ix.names[lname[i:]]
	if !found || e.n != nil || e.ptr {
		return Result{}, false
	}
	label := lname[:i-1]
	svc := e.svc
	for _, ep := range svc.Endpoints {
		if (!ep.Ready && !svc.PublishNotReadyAddresses) || endpointName(ep) != label {
			continue
		}
		ok = true
		if rr := ix.addrRR(qname, ep.Addr.Addr()); qtype == dns.TypeANY || rr.Header().Rrtype == qtype {
			r.Answer = append(r.Answer, rr)
		}
	}
	if ok && len(r.Answer) == 0 {
		r.Ns = []dns.RR{ix.soa}
	}
	return r, ok
}

// addrs are the A/AAAA records of svc's ClusterIPs at name.
func (ix *Index) addrs(name string, svc *service.Service) []dns.RR {
	out := make([]dns.RR, 0, len(svc.ClusterIPs))
	for _, ip := range svc.ClusterIPs {
		out = append(out, ix.addrRR(name, ip))
	}
	return out
}

func (ix *Index) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ix.ttl}
}

// addrRR is addrRR at name with the Index's TTL, the record and its address
// in one allocation.
func (ix *Index) addrRR(name string, ip netip.Addr) dns.RR {
	ip = ip.Unmap()
	if ip.Is4() {
		a := &struct {
			dns.A
			ip [4]byte
		}{ip: ip.As4()}
		a.Hdr, a.A.A = ix.hdr(name, dns.TypeA), a.ip[:]
		return &a.A
	}
	a := &struct {
		dns.AAAA
		ip [16]byte
	}{ip: ip.As16()}
	a.Hdr, a.AAAA.AAAA = ix.hdr(name, dns.TypeAAAA), a.ip[:]
	return &a.AAAA
}
