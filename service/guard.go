package service

import (
	"fmt"
	"net/netip"
	"slices"
)

// allocator knows which Service holds each virtual address of a Snapshot.
type allocator struct {
	clusterIPs map[netip.Addr]NamespacedName
	// vips are every service address: ClusterIPs, externalIPs and
	// LoadBalancer IPs, with their Service and kind, for refuse's reason
	// (made only when an endpoint is refused: a Snapshot of 20,000 Services
	// would otherwise make 20,000 strings that nobody reads).
	vips map[netip.Addr]vipOwner
}

// vipOwner is the Service that holds a virtual address, and as what.
type vipOwner struct {
	service NamespacedName
	kind    string // "the ClusterIP", "an external IP", "a load balancer IP"
}

// newAllocator is an allocator for about n Services.
func newAllocator(n int) *allocator {
	return &allocator{clusterIPs: make(map[netip.Addr]NamespacedName, n), vips: make(map[netip.Addr]vipOwner, n)}
}

// allocate claims svc's ClusterIPs, as the API server's allocator does: a
// ClusterIP already held by an earlier Service is refused, and svc with it
// (two Services on one ClusterIP would each be served differently by each
// path). Nothing is claimed when it fails.
func (a *allocator) allocate(svc *Service) error {
	for i, ip := range svc.ClusterIPs {
		if holder, taken := a.clusterIPs[ip]; taken {
			field := "spec.clusterIP"
			if i > 0 {
				field = fmt.Sprintf("spec.clusterIPs[%d]", i)
			}
			return &InvalidError{Kind: "service", Object: svc.NamespacedName, Field: field, Value: ip.String(),
				Reason: "already allocated to service " + holder.String()}
		}
	}
	for _, ip := range svc.ClusterIPs {
		a.clusterIPs[ip] = svc.NamespacedName
		a.vips[ip] = vipOwner{svc.NamespacedName, "the ClusterIP"}
	}
	for _, ip := range svc.ExternalIPs {
		a.vips[ip] = vipOwner{svc.NamespacedName, "an external IP"}
	}
	for _, ip := range svc.LoadBalancerIPs {
		a.vips[ip] = vipOwner{svc.NamespacedName, "a load balancer IP"}
	}
	return nil
}

// refuse says why ip must not be an endpoint: it is a service address, and a
// connection to it would come back into the proxy (each hop one more
// connection and file descriptor, until they run out).
func (a *allocator) refuse(ip netip.Addr) string {
	if o, ok := a.vips[ip.Unmap()]; ok {
		return "is " + o.kind + " of service " + o.service.String() + ": an endpoint must not lead back into the proxy"
	}
	return ""
}

// refusesAny reports whether refuse names a reason for any of eps' addresses.
func (a *allocator) refusesAny(eps []Endpoint) bool {
	for _, e := range eps {
		if _, ok := a.vips[e.Addr.Addr().Unmap()]; ok {
			return true
		}
	}
	return false
}

// specialIP says why the API server refuses ip as an endpoint address
// (ValidateNonSpecialIP): it would lead into the node itself, not to a pod.
func specialIP(ip netip.Addr) string {
	switch {
	case ip.IsUnspecified():
		return "is unspecified: an endpoint must be a pod's or node's address"
	case ip.IsLoopback():
		return "is loopback: it would reach the node's own listeners, not a pod"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "is link-local: it would reach the node's own listeners, not a pod"
	case ip.IsMulticast():
		return "is multicast: an endpoint must be one host"
	}
	return ""
}

// RefuseEndpoints returns snap without the endpoints refuse names a reason
// for, and an error for each (the node's own listeners, which only the node's
// configuration knows: svcproxy's /healthz and /metrics addresses). snap is
// not changed; Services without such endpoints are shared with the result.
func RefuseEndpoints(snap *Snapshot, refuse func(Endpoint) string) (*Snapshot, []error) {
	var errs []error
	out := make([]*Service, 0, snap.Len())
	for _, svc := range snap.Services() {
		var copied *Service
		for pi, p := range svc.Ports {
			// keep is made at the first refusal only: the usual port
			// refuses nothing, and its list is shared as it is (at
			// 10,000 Services a copy per port was most of what each
			// Snapshot allocated).
			var keep []Endpoint
			dropped := false
			for i, ep := range p.Endpoints {
				if why := refuse(ep); why != "" {
					errs = append(errs, fmt.Errorf("service port %s: endpoint %s: %s", p.Name, ep.Addr, why))
					if !dropped {
						keep, dropped = slices.Clone(p.Endpoints[:i:i]), true
					}
					continue
				}
				if dropped {
					keep = append(keep, ep)
				}
			}
			if !dropped {
				continue
			}
			if copied == nil {
				c := *svc
				c.Ports = slices.Clone(svc.Ports)
				copied = &c
			}
			np := *p
			np.Service, np.Endpoints = copied, keep
			copied.Ports[pi] = &np
		}
		if copied == nil {
			out = append(out, svc)
			continue
		}
		for i, p := range copied.Ports {
			if p.Service != copied {
				np := *p
				np.Service = copied
				copied.Ports[i] = &np
			}
		}
		out = append(out, copied)
	}
	if len(errs) == 0 {
		return snap, nil
	}
	return NewSnapshot(out, append(slices.Clone(snap.Errors()), errs...), WithNode(snap.node), WithChanges(snap.Changes())), errs
}
