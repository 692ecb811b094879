package dnsresolve

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service"
)

// This file holds what the Index knows of zones and namespaces beside the
// records: the reverse zones it answers for, each with its own SOA, and
// which namespaces have names at all.

// defaultReverseZones are kubeadm's: "kubernetes cluster.local in-addr.arpa
// ip6.arpa".
var defaultReverseZones = []string{"in-addr.arpa.", "ip6.arpa."}

// reverseSOAs makes the SOA of each reverse zone (nil: the default ones), as
// CoreDNS's kubernetes plugin answers for every zone it has: the same
// timers as the cluster zone's, ns.dns.<zone> and hostmaster.<zone>.
func reverseSOAs(zones []string, soa *dns.SOA) []*dns.SOA {
	if zones == nil {
		zones = defaultReverseZones
	}
	out := make([]*dns.SOA, 0, len(zones))
	for _, z := range zones {
		z = dns.CanonicalName(z)
		r := *soa
		r.Hdr.Name, r.Ns, r.Mbox = z, "ns.dns."+z, "hostmaster."+z
		out = append(out, &r)
	}
	// The longest first: a name matches the most specific zone.
	slices.SortStableFunc(out, func(a, b *dns.SOA) int { return len(b.Hdr.Name) - len(a.Hdr.Name) })
	return out
}

// reverseSOA is the SOA of the reverse zone lname (lower-case) is in, nil
// when it is in none.
func (ix *Index) reverseSOA(lname string) *dns.SOA {
	for _, soa := range ix.reverse {
		if dns.IsSubDomain(soa.Hdr.Name, lname) {
			return soa
		}
	}
	return nil
}

// soaOf is the SOA of the zone lname is in: a reverse zone's, or the
// cluster zone's.
func (ix *Index) soaOf(lname string) *dns.SOA {
	if !strings.HasSuffix(lname, ".arpa.") {
		return ix.soa
	}
	if soa := ix.reverseSOA(lname); soa != nil {
		return soa
	}
	return ix.soa
}

// reverseName is ip's reverse name, and whether one of the Index's reverse
// zones holds it: a PTR record outside them is never asked for.
func (b *builder) reverseName(ip netip.Addr) (string, bool) {
	rev := reverseName(ip)
	return rev, b.ix.reverseSOA(rev) != nil
}

// namespaceFilter says which namespaces have names, as CoreDNS's
// namespaceExposed does: those the namespaces option lists (all when it
// lists none) that exist. Whether one exists is the Snapshot's Namespaces
// when the source follows them (CoreDNS watches Namespaces); otherwise
// every namespace is taken to exist, and <ns>.svc.<zone> exists when a
// Service is in it.
type namespaceFilter struct {
	listed map[string]bool    // the namespaces option; nil: every namespace
	exist  service.Namespaces // nil: not known
}

func newNamespaceFilter(snap *service.Snapshot, listed []string) namespaceFilter {
	var f namespaceFilter
	if len(listed) > 0 {
		f.listed = make(map[string]bool, len(listed))
		for _, ns := range listed {
			f.listed[ns] = true
		}
	}
	if snap != nil {
		f.exist = snap.Namespaces()
	}
	return f
}

// has reports whether namespace ns (any case, as asked) has names.
func (f namespaceFilter) has(ns string) bool {
	if f.listed != nil && !f.listed[ns] && !f.listed[strings.ToLower(ns)] {
		return false
	}
	if f.exist == nil {
		return true
	}
	if f.exist.Has(ns) {
		return true
	}
	// Namespace names are lower-case DNS labels; a question may not be.
	return f.exist.Has(strings.ToLower(ns))
}

// namespaces makes <ns>.svc.<zone> exist for every namespace that has names,
// when the Snapshot says which exist: CoreDNS answers NODATA for a
// namespace without any Service, NXDOMAIN for one that does not exist.
func (b *builder) namespaces() {
	b.node("svc." + b.ix.zone)
	b.node(b.ix.podZone)
	for ns := range b.ix.exposed.exist {
		if b.ix.exposed.has(ns) {
			b.node(strings.ToLower(ns) + ".svc." + b.ix.zone)
		}
	}
}
