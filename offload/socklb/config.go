package socklb

import (
	"errors"
	"fmt"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/service"
)

// Config configures socklb mode: the hooks' maps (Maps) and the path beside
// them.
type Config struct {
	// Node is the node served. Family is that of the Services' addresses and
	// endpoints this mode puts in the maps: both families' Maps of a
	// dual-stack node share one set of maps (one kernel/socklb.Kernel: the
	// hooks are per cgroup, not per family); each adds, replaces and deletes
	// only elements whose VIP is of its family, as each of IPVS mode's
	// per-family Dataplanes does with virtual servers. NodeName selects this
	// node's endpoints for internalTrafficPolicy Local and the node hints of
	// traffic distribution. The hooks see no NodePort: the other fields are
	// the path beside's.
	dataplane.Node
	// Carries selects the service ports the maps carry (hybrid mode
	// promotes some ports to the kernel). Nil: every port.
	Carries func(service.PortName) bool
	// LB is the hooks' maps: a kernel/socklb.Kernel, or a Fake. Required.
	LB ksocklb.Interface
	// Beside is the path of every packet the hooks cannot see: NodePorts,
	// traffic forwarded from other hosts, sockets outside the cgroup, and
	// the connections the hooks leave alone (a port without endpoints,
	// which it rejects). svcproxy builds nftables mode there, restricted to
	// the same ports as Carries. Required by New, not by NewMaps.
	Beside dataplane.KernelPath
	// CheckPeriod is how often a sync reads the maps back and compares them
	// with what it wrote, repairing what another program changed (and the
	// first sync adopts what a previous process left pinned). Default 30s,
	// kube-proxy's --sync-period.
	CheckPeriod time.Duration
	// SyncPeriod is how long after a sync of the maps the next one comes
	// without a change (default 30s); LagBound is the maps' Syncer's (0:
	// twice SyncPeriod).
	SyncPeriod time.Duration
	LagBound   time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() error {
	if c.LB == nil {
		return errors.New("socklb config: LB is nil")
	}
	if err := c.Node.Check(); err != nil {
		return fmt.Errorf("socklb config: %w", err)
	}
	if c.CheckPeriod <= 0 {
		c.CheckPeriod = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}
