package socklb

import (
	"errors"
	"fmt"
	"time"

	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/service"
)

// Config configures a Proxier.
type Config struct {
	// Family is the IP family of the Services' addresses and endpoints this
	// Proxier puts in the maps: IPv4 (the zero value) or IPv6. Both
	// families' Proxiers of a dual-stack node share one set of maps (one
	// kernel/socklb.Kernel: the hooks are per cgroup, not per family); each
	// adds, replaces and deletes only elements whose VIP is of its family,
	// as each of IPVS mode's per-family Proxiers does with virtual servers.
	Family service.Family
	// NodeName selects this node's endpoints for internalTrafficPolicy
	// Local and the node hints of traffic distribution.
	NodeName string
	// LB is the hooks' maps: a kernel/socklb.Kernel, or a Fake. Required.
	LB ksocklb.Interface
	// Include selects the service ports the maps carry (hybrid mode
	// promotes some ports to the kernel). Nil: every port.
	Include func(*service.Port) bool
	// CheckPeriod is how often a sync reads the maps back and compares them
	// with what it wrote, repairing what another program changed (and the
	// first sync adopts what a previous process left pinned). Default 30s,
	// kube-proxy's --sync-period.
	CheckPeriod time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() error {
	if c.LB == nil {
		return errors.New("socklb config: LB is nil")
	}
	switch c.Family {
	case "":
		c.Family = service.IPv4
	case service.IPv4, service.IPv6:
	default:
		return fmt.Errorf("socklb config: Family %q: want IPv4 or IPv6", c.Family)
	}
	if c.CheckPeriod <= 0 {
		c.CheckPeriod = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}
