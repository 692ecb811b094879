package iptables

import (
	"errors"
	"fmt"

	"github.com/svcproxy/svcproxy/dataplane"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// Config configures iptables mode. Render reads only what the rules depend on
// besides the Snapshot: the zero value renders IPv4 rules for a node with no
// name, NodePorts on every local address, no masquerade of off-cluster
// traffic, and the masquerade mark 0x4000.
type Config struct {
	// Node is the node served: the rules name only its Family's addresses
	// and endpoints (iptables for IPv4, ip6tables for IPv6; a dual-stack node
	// runs one Dataplane per family, dataplane.Families). NodePortIPs empty
	// is every local address but loopback (addrtype LOCAL); iptables cannot
	// express none, so NoNodePorts is ignored. Loopback NodePortIPs are left
	// out: see renderFixed.
	dataplane.Node
	// Carries selects the service ports this dataplane serves (hybrid mode
	// promotes some ports to the kernel). Nil: every port.
	Carries func(service.PortName) bool
	// CountConnections keeps, across syncs, the packet counts of the DNAT rules
	// that Connections reads: a sync that rewrites a port's chains first adds
	// their counts to the port's carried total (hybrid mode's kernel path).
	CountConnections bool

	// IPTables is the family's iptables (kernel/iptables.New, or a Fake).
	// Required by New.
	IPTables kiptables.Interface
	// Periods are the syncs': conntrack cleanup, how often a sync comes and
	// checks the hooks from the built-in chains (kube-proxy
	// --iptables-sync-period, the period of its canary check), how often it
	// is full, the clock.
	kernelsync.Periods

	// largeCluster is set per sync, never by a caller: the Snapshot has
	// more than largeClusterEndpoints endpoints, and the endpoints' rules
	// go without comments (renderPort) and the ClusterIP jumps by block
	// (ruleset.blocks).
	largeCluster bool
}

func (c *Config) validate() error {
	if err := c.Node.Check(); err != nil {
		return fmt.Errorf("iptables config: %w", err)
	}
	return nil
}

// check is validate for New, which needs the kernel too.
func (c *Config) check() error {
	if c.IPTables == nil {
		return errors.New("iptables config: IPTables is nil")
	}
	return c.validate()
}

func (c *Config) mark() string { return fmt.Sprintf("%#08x", c.Mark()) }
