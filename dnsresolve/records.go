package dnsresolve

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service"
)

// This file holds the record forms of the specification, one function each.
// Every name is built lower-case; Lookup spells answers as the question did.

// service adds the records of one Service at <svc>.<ns>.svc.<zone>. The name
// exists (NODATA rather than NXDOMAIN) even when the Service has no address yet.
func (b *builder) service(svc *service.Service) {
	base := strings.ToLower(svc.Name + "." + svc.Namespace + ".svc." + b.ix.zone)
	n := b.node(base)
	switch {
	case svc.ExternalName != "":
		b.externalName(n, base, svc.ExternalName)
	case svc.Headless:
		b.headless(svc, base)
	default:
		b.clusterIP(svc, base)
	}
}

// externalName is spec 2.5: <svc>.<ns>.svc.<zone>. <ttl> IN CNAME <extname>.
func (b *builder) externalName(n *node, base, target string) {
	n.rrs = []dns.RR{&dns.CNAME{Hdr: b.hdr(base, dns.TypeCNAME), Target: dns.Fqdn(target)}}
	n.cname = true
}

// clusterIP is spec 2.3: A/AAAA of each ClusterIP, SRV per named port with the
// Service's name as target (and its addresses as additional records), PTR of
// each ClusterIP back to the Service.
func (b *builder) clusterIP(svc *service.Service, base string) {
	var addrs []dns.RR
	for _, ip := range svc.ClusterIPs {
		addrs = append(addrs, b.addr(base, ip))
		b.ptr(ip, base)
	}
	for _, p := range svc.Ports {
		if p.Name.Port == "" {
			continue // spec: SRV records exist for named ports only
		}
		name := srvName(p, base)
		b.add(name, &dns.SRV{Hdr: b.hdr(name, dns.TypeSRV), Weight: 100, Port: p.Port, Target: base})
		b.node(name).extra = addrs
	}
}

// headless is spec 2.4: an A/AAAA per published endpoint at the Service's name,
// <hostname>.<svc>.<ns>.svc.<zone> and a PTR for each endpoint with a hostname,
// and SRV per named port and such endpoint, targeting the hostname, on the
// endpoint's own port (no proxy stands between client and pod).
func (b *builder) headless(svc *service.Service, base string) {
	published := func(e service.Endpoint) bool { return e.Ready || svc.PublishNotReadyAddresses }

	// Service.Endpoints has every endpoint address once, whatever the ports:
	// a headless Service may have no ports at all and still has A records.
	seenIP := make(map[netip.Addr]bool)
	seenHost := make(map[string]bool)
	hostAddrs := make(map[string][]dns.RR)
	for _, e := range svc.Endpoints {
		if !published(e) {
			continue
		}
		ip := e.Addr.Addr()
		if !seenIP[ip] {
			seenIP[ip] = true
			b.addr(base, ip)
		}
		if e.Hostname == "" {
			continue
		}
		host := strings.ToLower(e.Hostname) + "." + base
		if key := host + "|" + ip.String(); !seenHost[key] {
			seenHost[key] = true
			hostAddrs[host] = append(hostAddrs[host], b.addr(host, ip))
			b.ptr(ip, host)
		}
	}

	for _, p := range svc.Ports {
		if p.Name.Port == "" {
			continue
		}
		var srvs []*dns.SRV
		seen := make(map[string]bool)
		for _, e := range p.Endpoints {
			if !published(e) || e.Hostname == "" {
				continue
			}
			host := strings.ToLower(e.Hostname) + "." + base
			if key := host + "|" + e.Addr.String(); !seen[key] {
				seen[key] = true
				srvs = append(srvs, &dns.SRV{Port: e.Addr.Port(), Target: host})
			}
		}
		if len(srvs) == 0 {
			continue
		}
		name := srvName(p, base)
		n := b.node(name)
		targets := make(map[string]bool)
		for _, srv := range srvs {
			// CoreDNS spreads a weight of 100 over the records of one SRV set.
			srv.Hdr, srv.Weight = b.hdr(name, dns.TypeSRV), uint16(max(1, 100/len(srvs)))
			n.rrs = append(n.rrs, srv)
			if !targets[srv.Target] {
				targets[srv.Target] = true
				n.extra = append(n.extra, hostAddrs[srv.Target]...)
			}
		}
	}
}

// srvName is _<port>._<proto>.<svc>.<ns>.svc.<zone>.
func srvName(p *service.Port, base string) string {
	return "_" + strings.ToLower(p.Name.Port) + "._" + strings.ToLower(string(p.Protocol)) + "." + base
}
