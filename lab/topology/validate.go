package topology

import (
	"fmt"
	"net/netip"
	"strings"
)

// Validate checks what would make Commands fail half-way: names, addresses
// and link names.
func (p *Plan) Validate() error {
	seenName := map[string]bool{}
	seenAddr := map[netip.Addr]bool{}
	for _, h := range append([]Host{p.Node}, p.Hosts...) {
		switch {
		case h.Name == "" || strings.ContainsAny(h.Name, "/ \t"):
			return fmt.Errorf("host %q: name: must be non-empty, without slashes or spaces", h.Name)
		case seenName[h.Name]:
			return fmt.Errorf("host %s: name: used twice", h.Name)
		case h.Role == RoleOutside && (p.ClusterCIDR.Contains(h.Addr) || !p.LabCIDR.Contains(h.Addr)):
			return fmt.Errorf("host %s: addr %s: want an address of the lab range %s beyond the cluster range %s", h.Name, h.Addr, p.LabCIDR, p.ClusterCIDR)
		case h.Role != RoleOutside && !p.ClusterCIDR.Contains(h.Addr):
			return fmt.Errorf("host %s: addr %s: not in the cluster range %s", h.Name, h.Addr, p.ClusterCIDR)
		case seenAddr[h.Addr]:
			return fmt.Errorf("host %s: addr %s: used twice", h.Name, h.Addr)
		case h.Role != RoleNode && (h.NodeLink == "" || len(h.NodeLink) > 15):
			// IFNAMSIZ is 16 bytes with the terminating NUL.
			return fmt.Errorf("host %s: node link %q: must be 1 to 15 characters", h.Name, h.NodeLink)
		}
		if err := p.validate6(h, seenAddr); err != nil {
			return err
		}
		seenName[h.Name], seenAddr[h.Addr] = true, true
	}
	if !p.LabCIDR.Contains(p.ClusterCIDR.Addr()) || p.LabCIDR.Bits() > p.ClusterCIDR.Bits() {
		return fmt.Errorf("lab range %s: must hold the cluster range %s", p.LabCIDR, p.ClusterCIDR)
	}
	if p.DualStack() && (!p.LabCIDR6.Contains(p.ClusterCIDR6.Addr()) || p.LabCIDR6.Bits() > p.ClusterCIDR6.Bits()) {
		return fmt.Errorf("lab range %s: must hold the cluster range %s", p.LabCIDR6, p.ClusterCIDR6)
	}
	if err := p.validatePodCIDR(); err != nil {
		return err
	}
	if !p.ServiceCIDR.Contains(p.DNS) {
		return fmt.Errorf("dns %s: not in the service range %s", p.DNS, p.ServiceCIDR)
	}
	return nil
}

// validatePodCIDR checks that the real node's pod range, when there is one,
// is in the cluster range and holds no host of the Plan, nor PodPool.
func (p *Plan) validatePodCIDR() error {
	c := p.PodCIDR
	if !c.IsValid() {
		return nil
	}
	if !c.Addr().Is4() || !p.ClusterCIDR.Contains(c.Addr()) || c.Bits() < p.ClusterCIDR.Bits() || c.Bits() > 30 {
		return fmt.Errorf("pod range %s: want an IPv4 range of 4 addresses or more in the cluster range %s", c, p.ClusterCIDR)
	}
	if c.Overlaps(PodPool) {
		return fmt.Errorf("pod range %s: overlaps the lab kubelet's pod pool %s", c, PodPool)
	}
	for _, h := range append([]Host{p.Node}, p.Hosts...) {
		if c.Contains(h.Addr) {
			return fmt.Errorf("pod range %s: holds host %s's address %s", c, h.Name, h.Addr)
		}
	}
	return nil
}

// validate6 checks h's IPv6 address: there in a dual-stack plan, in the
// ranges its role asks for, and used once.
func (p *Plan) validate6(h Host, seen map[netip.Addr]bool) error {
	a := h.Addr6
	switch {
	case !p.DualStack() && a.IsValid():
		return fmt.Errorf("host %s: addr6 %s: the plan has no IPv6 ranges", h.Name, a)
	case !p.DualStack():
		return nil
	case !a.Is6() || a.Is4In6():
		return fmt.Errorf("host %s: addr6 %q: want an IPv6 address", h.Name, a)
	case h.Role == RoleOutside && (p.ClusterCIDR6.Contains(a) || !p.LabCIDR6.Contains(a)):
		return fmt.Errorf("host %s: addr6 %s: want an address of the lab range %s beyond the cluster range %s", h.Name, a, p.LabCIDR6, p.ClusterCIDR6)
	case h.Role != RoleOutside && !p.ClusterCIDR6.Contains(a):
		return fmt.Errorf("host %s: addr6 %s: not in the cluster range %s", h.Name, a, p.ClusterCIDR6)
	case seen[a]:
		return fmt.Errorf("host %s: addr6 %s: used twice", h.Name, a)
	}
	seen[a] = true
	return nil
}
