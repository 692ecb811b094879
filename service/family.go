package service

import (
	"net/netip"
	"slices"
)

// Family is an IP family, named as v1.IPFamily names it.
type Family string

// The two IP families.
const (
	IPv4 Family = "IPv4"
	IPv6 Family = "IPv6"
)

// Families are both IP families, IPv4 first.
var Families = [...]Family{IPv4, IPv6}

// FamilyOf returns a's family; an IPv4-mapped IPv6 address ("::ffff:198.18.0.10")
// is IPv4, as the kernel treats it.
func FamilyOf(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// Has reports whether a is of family f.
func (f Family) Has(a netip.Addr) bool { return a.IsValid() && FamilyOf(a) == f }

// Other is the other family.
func (f Family) Other() Family {
	if f == IPv6 {
		return IPv4
	}
	return IPv6
}

// Addrs returns the addresses of as that are of family f, IPv4-mapped ones
// unmapped, in their order; nil when there are none.
func (f Family) Addrs(as []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range as {
		if f.Has(a) {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// Prefixes returns the prefixes of ps that are of family f, masked.
func (f Family) Prefixes(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.IsValid() && f.Has(p.Addr()) && !p.Addr().Is4In6() {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Endpoints returns the endpoints of eps whose address is of family f (a new
// slice: eps is not changed).
func (f Family) Endpoints(eps []Endpoint) []Endpoint {
	return slices.DeleteFunc(slices.Clone(eps), func(e Endpoint) bool { return !f.Has(e.Addr.Addr()) })
}

// Loopback is the family's loopback range: 127.0.0.0/8 or ::1/128.
func (f Family) Loopback() netip.Prefix {
	if f == IPv6 {
		return netip.MustParsePrefix("::1/128")
	}
	return netip.MustParsePrefix("127.0.0.0/8")
}

// Bits is the length of the family's addresses: 32 or 128.
func (f Family) Bits() int {
	if f == IPv6 {
		return 128
	}
	return 32
}

// IPFamilyPolicy is a Service's spec.ipFamilyPolicy.
type IPFamilyPolicy string

// The policies of the Kubernetes API.
const (
	// SingleStack: one ClusterIP, of the first of spec.ipFamilies.
	SingleStack IPFamilyPolicy = "SingleStack"
	// PreferDualStack: a ClusterIP of each family where the cluster has both,
	// one otherwise.
	PreferDualStack IPFamilyPolicy = "PreferDualStack"
	// RequireDualStack: a ClusterIP of each family, or no Service.
	RequireDualStack IPFamilyPolicy = "RequireDualStack"
)

// Family returns the view of the Snapshot that one IP family's dataplane
// serves, as kube-proxy hands each of its per-family proxiers the Services of
// its family: the Services with a ClusterIP of family f, each with only the
// addresses of f (ClusterIP, externalIPs, LoadBalancer IPs and source ranges)
// and only the endpoints of f. A Service of the other family only, a headless
// or an ExternalName Service is not in it.
//
// A Service all of whose addresses are of f is shared with s, not copied, so
// the view of a single-stack Snapshot costs one pass over it. The view is
// made once per Snapshot and family; like s, it is immutable.
func (s *Snapshot) Family(f Family) *Snapshot {
	i := 0
	if f == IPv6 {
		i = 1
	}
	s.views[i].once.Do(func() { s.views[i].snap = s.familyView(f) })
	return s.views[i].snap
}

func (s *Snapshot) familyView(f Family) *Snapshot {
	out := make([]*Service, 0, len(s.services))
	for _, svc := range s.services {
		if v := serviceView(svc, f); v != nil {
			out = append(out, v)
		}
	}
	return NewSnapshot(out, s.errs, WithNode(s.node), WithChanges(s.Changes()))
}

// serviceView is svc as family f's dataplane sees it, or nil when svc has no
// ClusterIP of f.
func serviceView(svc *Service, f Family) *Service {
	if len(f.Addrs(svc.ClusterIPs)) == 0 {
		return nil
	}
	if onlyFamily(svc, f) {
		return svc
	}
	v := *svc
	v.ClusterIPs = f.Addrs(svc.ClusterIPs)
	v.ExternalIPs = f.Addrs(svc.ExternalIPs)
	v.LoadBalancerIPs = f.Addrs(svc.LoadBalancerIPs)
	v.LoadBalancerSourceRanges = f.Prefixes(svc.LoadBalancerSourceRanges)
	v.Endpoints = f.Endpoints(svc.Endpoints)
	v.Triggers = slices.DeleteFunc(slices.Clone(svc.Triggers), func(t Trigger) bool { return t.Family != f })
	v.Ports = make([]*Port, len(svc.Ports))
	for i, p := range svc.Ports {
		np := *p
		np.Service = &v
		np.Endpoints = f.Endpoints(p.Endpoints)
		v.Ports[i] = &np
	}
	return &v
}

// onlyFamily reports whether every address svc holds is of family f.
func onlyFamily(svc *Service, f Family) bool {
	for _, as := range [][]netip.Addr{svc.ClusterIPs, svc.ExternalIPs, svc.LoadBalancerIPs} {
		for _, a := range as {
			if !f.Has(a) || a.Is4In6() {
				return false
			}
		}
	}
	for _, p := range svc.LoadBalancerSourceRanges {
		if !f.Has(p.Addr()) || p.Addr().Is4In6() {
			return false
		}
	}
	for _, e := range svc.Endpoints {
		if !f.Has(e.Addr.Addr()) {
			return false
		}
	}
	for _, p := range svc.Ports {
		for _, e := range p.Endpoints {
			if !f.Has(e.Addr.Addr()) {
				return false
			}
		}
	}
	return true
}

// Port returns p with only the endpoints of family f: p itself when all of its
// endpoints are of f (every port of Snapshot.Family(f) is), otherwise a copy.
// A dataplane of one family categorizes these (Port.Categorize), as each of
// kube-proxy's per-family proxiers sees only its family's endpoints: whether
// the port has endpoints at all, and which hints hold, is the family's own.
func (f Family) Port(p *Port) *Port {
	if !slices.ContainsFunc(p.Endpoints, func(e Endpoint) bool { return !f.Has(e.Addr.Addr()) }) {
		return p
	}
	c := *p
	c.Endpoints = f.Endpoints(p.Endpoints)
	return &c
}
