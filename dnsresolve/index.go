package dnsresolve

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service"
)

// SchemaVersion is the version of the Kubernetes DNS-Based Service Discovery
// specification these records follow, served as dns-version.<zone> TXT.
const SchemaVersion = "1.1.0"

// DefaultZone is the cluster domain when none is configured.
const DefaultZone = "cluster.local."

// IndexConfig says how an Index names and times its records.
type IndexConfig struct {
	// Zone is the cluster domain ("cluster.local"); empty means DefaultZone.
	Zone string
	// TTL of every record, and of negative answers (the SOA's minimum).
	TTL uint32
	// Serial is the SOA serial; the Server raises it with every Snapshot.
	Serial uint32
	// NSAddrs are the addresses of ns.dns.<zone>, the name server that the
	// zone's NS and SOA records name: the DNS server's own addresses. None:
	// the name exists without addresses.
	NSAddrs []netip.Addr
	// Pods says how names under pod.<zone> are answered; empty means
	// PodsInsecure (kubeadm's Corefile).
	Pods PodMode
	// ReverseZones are the reverse zones the Index is authoritative for
	// beside Zone, as the kubernetes plugin's zones list them: the PTR
	// records of ClusterIPs and endpoints in them, NXDOMAIN for their other
	// names. nil means in-addr.arpa. and ip6.arpa. (kubeadm's Corefile);
	// empty, none: no PTR record, and reverse names are not the Index's.
	ReverseZones []string
	// Namespaces, when not empty, are the only namespaces whose names the
	// Index has (the kubernetes plugin's namespaces option).
	Namespaces []string
}

// Index holds every name one Snapshot produces, keyed by lower-case name, so
// a question costs one map lookup. It is immutable once built: the Server
// builds a new Index for every Snapshot and swaps it in atomically.
//
// Most names of a cluster are a ClusterIP Service's: its own name, its SRV
// names and the reverse names of its ClusterIPs. Their records follow from the
// Service alone, so the Index keeps the Service and makes them when asked
// (compact.go); every other name keeps its records, built ahead (a node).
type Index struct {
	zone     string
	podZone  string // "pod.<zone>"
	pods     PodMode
	ttl      uint32
	soa      *dns.SOA
	reverse  []*dns.SOA // the reverse zones' SOAs, each's owner its zone
	names    map[string]entry
	services int
	snap     *service.Snapshot // the Snapshot indexed, to tell an unchanged one

	// exposed says which namespaces have names (zones.go).
	exposed namespaceFilter
	podIPs  service.PodIPs // nil: pods not followed

	wires wires     // answers kept encoded, filled by questions (wire.go)
	neg   negatives // the zone's NXDOMAIN and NODATA, encoded once
}

// entry is what the Index holds for one name: a node of records built ahead,
// or a ClusterIP Service whose records are made when asked.
type entry struct {
	n   *node
	svc *service.Service // when n is nil: the name is svc's own, or, with ptr, the reverse name of one of its ClusterIPs
	ptr bool
	// ep, when above 0, makes a ptr entry the reverse name of
	// svc.Endpoints[ep-1] instead (CoreDNS answers PTR for the endpoints
	// of every Service, not only headless ones).
	ep int32
}

// node is one owner name: its records and, for SRV, the A/AAAA of its targets.
type node struct {
	rrs   []dns.RR
	extra []dns.RR
	cname bool // rrs is a single CNAME (an ExternalName Service)
}

// Result is the answer to a question the Index is authoritative for.
type Result struct {
	Rcode  int // dns.RcodeSuccess (with or without records) or dns.RcodeNameError
	Answer []dns.RR
	Ns     []dns.RR // the zone's SOA when Answer is empty
	Extra  []dns.RR // A/AAAA of SRV targets, or of the name server for NS
}

// NewIndex builds the records of snap (nil: no Services) under cfg.Zone.
func NewIndex(snap *service.Snapshot, cfg IndexConfig) *Index {
	return newIndex(snap, cfg, false)
}

// newIndex is NewIndex; eager builds every name's records ahead, a ClusterIP
// Service's too.
func newIndex(snap *service.Snapshot, cfg IndexConfig, eager bool) *Index {
	zone := dns.CanonicalName(cfg.Zone)
	if cfg.Zone == "" {
		zone = DefaultZone
	}
	b := &builder{eager: eager, ix: &Index{zone: zone, ttl: cfg.TTL, names: make(map[string]entry), snap: snap,
		podZone: "pod." + zone, pods: cfg.Pods}}
	if b.ix.pods == "" {
		b.ix.pods = PodsInsecure
	}
	b.ix.exposed = newNamespaceFilter(snap, cfg.Namespaces)
	if snap != nil {
		b.ix.podIPs = snap.PodIPs()
	}
	if snap != nil {
		// A ClusterIP Service has two names, its own and its ClusterIP's reverse.
		b.ix.names = make(map[string]entry, 2*snap.Len())
		b.ix.services = snap.Len()
	}
	b.ix.soa = &dns.SOA{
		// CoreDNS's kubernetes plugin uses the same mailbox, timers and ns name.
		Hdr:     b.hdr(zone, dns.TypeSOA),
		Ns:      "ns.dns." + zone,
		Mbox:    "hostmaster." + zone,
		Serial:  cfg.Serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  cfg.TTL,
	}
	// CoreDNS's plugin.SOA: the SOA's own TTL is the zone's, at most 300s.
	b.ix.soa.Hdr.Ttl = min(cfg.TTL, 300)
	b.ix.reverse = reverseSOAs(cfg.ReverseZones, b.ix.soa)
	b.apex(zone, cfg.NSAddrs)
	b.namespaces()
	if snap != nil {
		for _, svc := range snap.Services() {
			if b.ix.exposed.has(svc.Namespace) {
				b.service(svc)
			}
		}
	}
	return b.ix
}

// Zone returns the cluster domain as a lower-case FQDN ("cluster.local.").
func (ix *Index) Zone() string { return ix.zone }

// Len is the number of Services indexed.
func (ix *Index) Len() int { return ix.services }

// InZone reports whether name (any case) is the zone or below it.
func (ix *Index) InZone(name string) bool {
	return dns.IsSubDomain(ix.zone, strings.ToLower(dns.Fqdn(name)))
}

// Lookup answers a question for qname (any case) and qtype. ok is false when
// the name is not the Index's to answer: outside its zone and its reverse
// zones. In them a name it does not have is NXDOMAIN with that zone's SOA;
// the caller decides whether that falls through to the upstreams instead
// (CoreDNS's "fallthrough in-addr.arpa ip6.arpa").
//
// Record owner names are spelled as in qname: a resolver that randomises the
// case of its questions (DNS 0x20) finds them as it asked.
func (ix *Index) Lookup(qname string, qtype uint16) (r Result, ok bool) {
	qname = dns.Fqdn(qname)
	lname := strings.ToLower(qname)
	e, found := ix.names[lname]
	switch {
	case found && e.n == nil:
		return ix.compact(e, qname, lname, qtype), true
	case !found:
		if r, ok := ix.srvName(qname, lname, qtype); ok {
			return r, true
		}
		if r, ok := ix.endpointName(qname, lname, qtype); ok {
			return r, true
		}
		if !dns.IsSubDomain(ix.zone, lname) {
			soa := ix.reverseSOA(lname)
			switch {
			case soa == nil:
				return Result{}, false
			case lname != soa.Hdr.Name:
				return Result{Rcode: dns.RcodeNameError, Ns: []dns.RR{soa}}, true
			case qtype == dns.TypeSOA:
				return Result{Answer: []dns.RR{soa}}, true
			}
			return Result{Ns: []dns.RR{soa}}, true // the apex: NODATA
		}
		if dns.IsSubDomain(ix.podZone, lname) {
			return ix.pod(qname, lname, qtype), true
		}
		return Result{Rcode: dns.RcodeNameError, Ns: []dns.RR{ix.soa}}, true
	}
	n := e.n
	switch {
	case qtype == dns.TypeANY:
		r.Answer = n.rrs
	case n.cname:
		// RFC 1034 3.6.2: a CNAME answers every type; the resolver follows it.
		r.Answer = n.rrs
	default:
		r.Answer = ofType(n.rrs, qtype)
	}
	if len(r.Answer) == 0 {
		r.Ns = []dns.RR{ix.soaOf(lname)}
		return r, true
	}
	if qtype == dns.TypeSRV || qtype == dns.TypeNS {
		r.Extra = n.extra
	}
	if qname != lname {
		r.Answer = renamed(r.Answer, qname)
	}
	return r, true
}

// ofType returns the records of rrs with type t, sharing rrs when all are.
func ofType(rrs []dns.RR, t uint16) []dns.RR {
	n := 0
	for _, rr := range rrs {
		if rr.Header().Rrtype == t {
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case len(rrs):
		return rrs
	}
	out := make([]dns.RR, 0, n)
	for _, rr := range rrs {
		if rr.Header().Rrtype == t {
			out = append(out, rr)
		}
	}
	return out
}

// renamed copies rrs with their owner name set to name. The Index's records are
// shared between queries and never modified.
func renamed(rrs []dns.RR, name string) []dns.RR {
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		out[i] = dns.Copy(rr)
		out[i].Header().Name = name
	}
	return out
}

// builder fills an Index; the per-Service record forms are in records.go.
type builder struct {
	ix *Index
	// eager builds every name's records ahead, a ClusterIP Service's too
	// (tests compare both forms).
	eager bool
}

func (b *builder) hdr(name string, t uint16) dns.RR_Header { return b.ix.hdr(name, t) }

// node returns the node of name, creating it and, inside the zone, every empty
// ancestor down to the zone (RFC 8020: an empty non-terminal exists, so its
// answer is NODATA, not NXDOMAIN).
func (b *builder) node(name string) *node {
	if e, ok := b.ix.names[name]; ok {
		if e.n != nil {
			return e.n
		}
		// A ClusterIP Service's name that something else names too (it
		// cannot happen for the Service's own name, which has more labels
		// than any name made before it; a reverse name can be an endpoint's
		// too): its records are built ahead from now on, beside the others.
		delete(b.ix.names, name)
		b.materialize(e, name)
		return b.ix.names[name].n
	}
	n := &node{}
	b.ix.names[name] = entry{n: n}
	b.ancestors(name)
	return n
}

// ancestors makes every empty ancestor of name down to the zone exist. A
// ClusterIP Service's compact entry is an ancestor that exists already (an
// endpoint's name is below it): it stays compact.
func (b *builder) ancestors(name string) {
	for name != b.ix.zone && dns.IsSubDomain(b.ix.zone, name) {
		i, end := dns.NextLabel(name, 0)
		if end {
			return
		}
		name = name[i:]
		if _, ok := b.ix.names[name]; ok {
			return // it exists, and so do its ancestors
		}
		b.ix.names[name] = entry{n: &node{}}
	}
}

func (b *builder) add(name string, rr dns.RR) {
	n := b.node(name)
	n.rrs = append(n.rrs, rr)
}

// addr adds an A or AAAA record for ip at name.
func (b *builder) addr(name string, ip netip.Addr) dns.RR {
	rr := addrRR(b.hdr(name, dns.TypeA), ip)
	b.add(name, rr)
	return rr
}

// reverseName is the in-addr.arpa name of an IPv4 address, the ip6.arpa
// nibbles of an IPv6 one.
func reverseName(ip netip.Addr) string {
	rev, _ := dns.ReverseAddr(ip.Unmap().String()) // no error for a valid netip.Addr
	return rev
}

// addrRR is an A record for an IPv4 address, an AAAA record otherwise; hdr's
// type is set accordingly.
func addrRR(hdr dns.RR_Header, ip netip.Addr) dns.RR {
	ip = ip.Unmap()
	if ip.Is4() {
		hdr.Rrtype = dns.TypeA
		a := ip.As4()
		return &dns.A{Hdr: hdr, A: a[:]}
	}
	hdr.Rrtype = dns.TypeAAAA
	a := ip.As16()
	return &dns.AAAA{Hdr: hdr, AAAA: a[:]}
}
