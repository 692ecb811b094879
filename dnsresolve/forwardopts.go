package dnsresolve

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"github.com/miekg/dns"
)

// ForwardOptions are CoreDNS's forward options beside the upstreams, the
// timeout and the bounds of Config. The zero value is clusterdns's own
// forwarding (its flags): every name outside the zone, upstreams in order,
// SERVFAIL and REFUSED moving on to the next one.
type ForwardOptions struct {
	// From is the zone whose names go upstream; "" or "." every name.
	// Except are zones that do not. A name that does not go upstream and
	// that the Index does not answer is SERVFAIL, as CoreDNS answers a query
	// no plugin takes.
	From   string
	Except []string
	// Policy orders the upstreams: "sequential" (the default here),
	// "random" (CoreDNS's default) or "round_robin". Healthy ones come
	// first in any order.
	Policy string
	// ForceTCP asks upstreams over TCP only. Without it, UDP first and
	// TCP when the answer is truncated (CoreDNS's prefer_udp).
	ForceTCP bool
	// Failover are the response codes that move on to the next upstream.
	// nil: SERVFAIL and REFUSED; empty: none (CoreDNS's default: the first
	// answer is the answer).
	Failover []int
	// HealthCheckNoRec probes a down upstream without RD;
	// HealthCheckDomain is the name the probe asks ("." by default).
	HealthCheckNoRec  bool
	HealthCheckDomain string
}

// forwards reports whether name goes upstream: under From and not under
// Except.
func (o *ForwardOptions) forwards(name string) bool {
	if o.From == "" && len(o.Except) == 0 {
		return true
	}
	lname := dns.CanonicalName(name)
	if o.From != "" && !dns.IsSubDomain(dns.CanonicalName(o.From), lname) {
		return false
	}
	for _, z := range o.Except {
		if dns.IsSubDomain(dns.CanonicalName(z), lname) {
			return false
		}
	}
	return true
}

// failsOver reports whether an upstream's answer with rcode moves on to the
// next upstream.
func (o *ForwardOptions) failsOver(rcode int) bool {
	if o.Failover == nil {
		return rcode == dns.RcodeServerFailure || rcode == dns.RcodeRefused
	}
	return slices.Contains(o.Failover, rcode)
}

// policy puts a list of upstream indexes in the order the policy asks.
type policy struct {
	name string
	next atomic.Uint32 // round_robin's start
}

func (p *policy) order(idx []int) []int {
	if len(idx) < 2 {
		return idx
	}
	switch p.name {
	case "random":
		rand.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	case "round_robin":
		start := int(p.next.Add(1)-1) % len(idx)
		slices.Reverse(idx[:start])
		slices.Reverse(idx[start:])
		slices.Reverse(idx)
	}
	return idx
}

// roundRobin shuffles the address records (A, AAAA) and MX records of an
// answer, as CoreDNS's loadbalance plugin does: CNAMEs first, then the other
// records, then the addresses, then MX. The sections are copied first: an
// answer from the Index shares its records' slices.
func roundRobin(m *dns.Msg) {
	if m.Rcode != dns.RcodeSuccess || len(m.Question) == 0 {
		return
	}
	if t := m.Question[0].Qtype; t == dns.TypeAXFR || t == dns.TypeIXFR {
		return
	}
	m.Answer = shuffleSection(m.Answer)
	m.Ns = shuffleSection(m.Ns)
	m.Extra = shuffleSection(m.Extra)
}

func shuffleSection(in []dns.RR) []dns.RR {
	n := 0
	for _, rr := range in {
		if t := rr.Header().Rrtype; t == dns.TypeA || t == dns.TypeAAAA || t == dns.TypeMX {
			n++
		}
	}
	if n < 2 {
		return in
	}
	out := make([]dns.RR, 0, len(in))
	var addrs, mx []dns.RR
	for _, rr := range in {
		if rr.Header().Rrtype == dns.TypeCNAME {
			out = append(out, rr)
		}
	}
	for _, rr := range in {
		switch rr.Header().Rrtype {
		case dns.TypeCNAME:
		case dns.TypeA, dns.TypeAAAA:
			addrs = append(addrs, rr)
		case dns.TypeMX:
			mx = append(mx, rr)
		default:
			out = append(out, rr)
		}
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	rand.Shuffle(len(mx), func(i, j int) { mx[i], mx[j] = mx[j], mx[i] })
	return append(append(out, addrs...), mx...)
}
