package service

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Build converts API objects into a Snapshot. Invalid Services, EndpointSlices
// and Endpoints are skipped and reported in Snapshot.Errors; every other object
// still works.
//
// Endpoints come from the EndpointSlices labelled with the Service's name
// (kubernetes.io/service-name), or, for a Service that has no slice at all, from
// its v1.Endpoints object. A slice port is matched to a service port by name, as
// kube-proxy does: a named targetPort may resolve to a different number in each
// slice (pods of two versions may name different container ports "http").
// opts give the Snapshot what it carries besides (WithNode, WithChanges).
func Build(services []*v1.Service, slices []*discoveryv1.EndpointSlice, endpoints []*v1.Endpoints, opts ...SnapshotOption) *Snapshot {
	svcs := make([]*ServiceObject, len(services))
	for i, obj := range services {
		svcs[i] = ConvertService(obj)
	}
	ess := make([]*SliceObject, len(slices))
	for i, es := range slices {
		ess[i] = ConvertSlice(es)
	}
	return Join(svcs, ess, endpoints, opts...)
}

// convertService validates one Service and converts it, without endpoints.
func convertService(obj *v1.Service) (*Service, error) {
	if err := validateService(obj); err != nil {
		return nil, err
	}
	spec := &obj.Spec
	svc := &Service{
		NamespacedName:           NamespacedName{Namespace: obj.Namespace, Name: obj.Name},
		Type:                     Type(cmp.Or(string(spec.Type), string(v1.ServiceTypeClusterIP))),
		ExternalPolicyLocal:      spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal,
		InternalPolicyLocal:      spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal,
		PublishNotReadyAddresses: spec.PublishNotReadyAddresses,
		Annotations:              obj.Annotations,
	}
	if spec.TrafficDistribution != nil {
		svc.TrafficDistribution = *spec.TrafficDistribution
	}
	if svc.Type == TypeExternalName {
		// Only an ExternalName Service is an alias. A Service whose type
		// changed from ExternalName keeps spec.externalName (the API server
		// does not clear it), and must answer with its ClusterIP, as CoreDNS
		// decides by spec.type (the DNS conformance test "should provide DNS
		// for ExternalName services" changes the type this way).
		svc.ExternalName = spec.ExternalName
	} else {
		for _, s := range clusterIPStrings(spec) {
			if s == v1.ClusterIPNone {
				svc.Headless = true
				continue
			}
			svc.ClusterIPs = append(svc.ClusterIPs, mustParseAddr(s))
		}
		svc.IPFamilies, svc.IPFamilyPolicy = ipFamilies(spec, svc.ClusterIPs)
	}
	for _, s := range spec.ExternalIPs {
		svc.ExternalIPs = append(svc.ExternalIPs, mustParseAddr(s))
	}
	for _, ing := range obj.Status.LoadBalancer.Ingress {
		if ing.IP != "" && (ing.IPMode == nil || *ing.IPMode != v1.LoadBalancerIPModeProxy) {
			svc.LoadBalancerIPs = append(svc.LoadBalancerIPs, mustParseAddr(ing.IP))
		}
	}
	if svc.Type == TypeLoadBalancer {
		_, ranges := sourceRanges(obj)
		for _, s := range ranges {
			p, _ := ParsePrefix(s)
			svc.LoadBalancerSourceRanges = append(svc.LoadBalancerSourceRanges, p)
		}
		if spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
			svc.HealthCheckNodePort = uint16(spec.HealthCheckNodePort)
		}
	}
	if spec.SessionAffinity == v1.ServiceAffinityClientIP {
		svc.Affinity = Affinity{ClientIP: true, Timeout: DefaultAffinityTimeout}
		if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			svc.Affinity.Timeout = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	for _, sp := range spec.Ports {
		proto := Protocol(cmp.Or(string(sp.Protocol), string(TCP)))
		svc.Ports = append(svc.Ports, &Port{
			Name:       PortName{NamespacedName: svc.NamespacedName, Port: sp.Name, Protocol: proto},
			Service:    svc,
			Port:       uint16(sp.Port),
			Protocol:   proto,
			NodePort:   uint16(sp.NodePort),
			TargetPort: sp.TargetPort.String(),
		})
	}
	return svc, nil
}

// ipFamilies returns spec.ipFamilies and spec.ipFamilyPolicy (validated), or
// what the API server defaults them to: the families of the ClusterIPs, and
// SingleStack, or RequireDualStack for a ClusterIP of each family.
func ipFamilies(spec *v1.ServiceSpec, clusterIPs []netip.Addr) ([]Family, IPFamilyPolicy) {
	var fams []Family
	for _, f := range spec.IPFamilies {
		fams = append(fams, Family(f))
	}
	if len(fams) == 0 {
		for _, ip := range clusterIPs {
			fams = append(fams, FamilyOf(ip))
		}
	}
	policy := SingleStack
	if len(clusterIPs) == 2 {
		policy = RequireDualStack
	}
	if spec.IPFamilyPolicy != nil {
		policy = IPFamilyPolicy(*spec.IPFamilyPolicy)
	}
	return fams, policy
}

// clusterIPStrings returns spec.clusterIPs, or spec.clusterIP for objects
// written before dual-stack (and for hand-written manifests that set only it).
func clusterIPStrings(spec *v1.ServiceSpec) []string {
	if len(spec.ClusterIPs) > 0 {
		return spec.ClusterIPs
	}
	if spec.ClusterIP != "" {
		return []string{spec.ClusterIP}
	}
	return nil
}

// attachSlices fills the endpoints of svc's ports from its EndpointSlices.
// An address that refuse names a reason for is left out, with an error
// naming it. The Service's endpoints of a Service with one slice are that
// slice's (ConvertSlice sorted them; both are immutable); each port's are a
// copy with its number.
func attachSlices(svc *Service, ess []*SliceObject, refuse func(netip.Addr) string) []error {
	var errs []error
	kept := make([][]Endpoint, len(ess)) // per slice, without the refused
	for i, es := range ess {
		if !es.trigger.At.IsZero() {
			svc.Triggers = append(svc.Triggers, es.trigger)
		}
		kept[i] = es.endpoints
		copied := false
		for j, ep := range es.endpoints {
			why := refuse(ep.Addr.Addr())
			switch {
			case why != "":
				errs = append(errs, refusedEndpoint(es, es.field(j), ep.Addr.Addr(), why))
				if !copied {
					kept[i], copied = slices.Clone(es.endpoints[:j:j]), true
				}
			case copied:
				kept[i] = append(kept[i], ep)
			}
		}
	}
	if len(kept) == 1 && distinct(kept[0]) {
		svc.Endpoints = kept[0]
	} else {
		svc.Endpoints = firstPerAddr(slices.Concat(kept...))
	}

	for _, p := range svc.Ports {
		// Sized first: a Snapshot keeps these lists (at 250,000 endpoints
		// the largest thing svcproxy holds), and append's doubling would
		// keep up to twice the room and leave the smaller arrays as garbage.
		n := 0
		for i, es := range ess {
			if _, ok := es.port(p); ok {
				n += len(kept[i])
			}
		}
		var eps []Endpoint // nil when there are none, as before
		if n > 0 {
			eps = make([]Endpoint, 0, n)
		}
		for i, es := range ess {
			number, ok := es.port(p)
			if !ok {
				continue
			}
			for _, ep := range kept[i] {
				ep.Addr = netip.AddrPortFrom(ep.Addr.Addr(), number)
				eps = append(eps, ep)
			}
		}
		p.Endpoints = firstPerAddr(eps)
	}
	return errs
}

// byAddr orders endpoints by address, then port.
func byAddr(a, b Endpoint) int { return a.Addr.Compare(b.Addr) }

// distinct says whether eps are sorted by address with no address twice.
func distinct(eps []Endpoint) bool {
	for i := 1; i < len(eps); i++ {
		if byAddr(eps[i-1], eps[i]) >= 0 {
			return false
		}
	}
	return true
}

// firstPerAddr sorts eps by address and keeps, of the endpoints with one
// address, the first: the same endpoint may sit in two slices while they are
// rebalanced. It may reorder eps.
func firstPerAddr(eps []Endpoint) []Endpoint {
	if distinct(eps) {
		return eps
	}
	slices.SortStableFunc(eps, byAddr)
	return slices.CompactFunc(eps, func(a, b Endpoint) bool { return a.Addr == b.Addr })
}

// sliceEndpoint converts one slice endpoint (its first address, as kube-proxy
// uses) with the API's defaults for unset conditions.
func sliceEndpoint(e discoveryv1.Endpoint) Endpoint {
	ep := Endpoint{Addr: netip.AddrPortFrom(mustParseAddr(e.Addresses[0]), 0)}
	c := e.Conditions
	ep.Ready = c.Ready == nil || *c.Ready
	ep.Serving = ep.Ready
	if c.Serving != nil {
		ep.Serving = *c.Serving
	}
	ep.Terminating = c.Terminating != nil && *c.Terminating
	if e.NodeName != nil {
		ep.NodeName = *e.NodeName
	}
	if e.Zone != nil {
		ep.Zone = *e.Zone
	}
	if e.Hostname != nil {
		ep.Hostname = *e.Hostname
	}
	// The hints, as kube-proxy's EndpointSliceCache reads them (its
	// addEndpoints): a hint without names is none.
	if h := e.Hints; h != nil {
		for _, z := range h.ForZones {
			ep.ForZones = append(ep.ForZones, z.Name)
		}
		for _, n := range h.ForNodes {
			ep.ForNodes = append(ep.ForNodes, n.Name)
		}
	}
	return ep
}

// attachEndpoints fills svc's endpoints from a v1.Endpoints object: addresses
// are ready and serving, notReadyAddresses neither.
func attachEndpoints(svc *Service, obj *v1.Endpoints, refuse func(netip.Addr) string) []error {
	var errs []error
	byIP := make(map[netip.Addr]Endpoint)
	for i, ss := range obj.Subsets {
		refused := func(field string, j int, a v1.EndpointAddress) bool {
			why := refuse(netip.MustParseAddr(a.IP))
			if why != "" {
				errs = append(errs, &InvalidError{Kind: "endpoints", Object: NamespacedName{Namespace: obj.Namespace, Name: obj.Name},
					Field: fmt.Sprintf("subsets[%d].%s[%d].ip", i, field, j), Value: a.IP, Reason: why})
			}
			return why != ""
		}
		each := func(a v1.EndpointAddress, ready bool) Endpoint {
			ep := Endpoint{Addr: netip.AddrPortFrom(mustParseAddr(a.IP), 0), Ready: ready, Serving: ready, Hostname: a.Hostname}
			if a.NodeName != nil {
				ep.NodeName = *a.NodeName
			}
			if _, dup := byIP[ep.Addr.Addr()]; !dup {
				byIP[ep.Addr.Addr()] = ep
			}
			return ep
		}
		var eps []Endpoint
		for j, a := range ss.Addresses {
			if !refused("addresses", j, a) {
				eps = append(eps, each(a, true))
			}
		}
		for j, a := range ss.NotReadyAddresses {
			if !refused("notReadyAddresses", j, a) {
				eps = append(eps, each(a, false))
			}
		}
		for _, p := range svc.Ports {
			for _, sp := range ss.Ports {
				if sp.Name != p.Name.Port || Protocol(cmp.Or(string(sp.Protocol), string(TCP))) != p.Protocol {
					continue
				}
				for _, ep := range eps {
					ep.Addr = netip.AddrPortFrom(ep.Addr.Addr(), uint16(sp.Port))
					p.Endpoints = append(p.Endpoints, ep)
				}
			}
		}
	}
	svc.Endpoints = sortedEndpoints(byIP)
	for _, p := range svc.Ports {
		sortEndpoints(p.Endpoints)
		p.Endpoints = slices.CompactFunc(p.Endpoints, func(a, b Endpoint) bool { return a.Addr == b.Addr })
	}
	return errs
}

func sortedEndpoints(byIP map[netip.Addr]Endpoint) []Endpoint {
	out := make([]Endpoint, 0, len(byIP))
	for _, ep := range byIP {
		out = append(out, ep)
	}
	sortEndpoints(out)
	return out
}

func sortEndpoints(eps []Endpoint) {
	slices.SortFunc(eps, func(a, b Endpoint) int { return a.Addr.Compare(b.Addr) })
}

func addrPort(ip netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(ip, port) }
