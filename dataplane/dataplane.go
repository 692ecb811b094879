package dataplane

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/service"
)

// Interface is one proxy mode: what cmd/svcproxy feeds and its HTTP endpoints
// read.
type Interface interface {
	// Mode is the mode that runs, after any fallback: "userspace",
	// "iptables", "nftables", "ipvs", "socklb", "hybrid" (what /proxyMode
	// answers).
	Mode() string
	// Sync makes the dataplane serve snap and returns once it does. An error
	// means part of snap is not served yet: Run retries it, and Healthy says
	// so. Sync is never called with a nil Snapshot, and a mode syncs nothing
	// before its first Sync, so a restart never blanks the rules an earlier
	// process left.
	Sync(ctx context.Context, snap *service.Snapshot) error
	// Run owns the mode's goroutines (resyncs, retries, sweeps) until ctx
	// ends, then shuts down; each mode documents what happens to open
	// connections and to its rules then.
	Run(ctx context.Context) error
	// Healthy is nil while the mode serves the latest Snapshot, or has been
	// handed it less than a bound ago (Record); else the reason.
	Healthy() error
	// Lag is nil while no Snapshot handed to Sync has waited longer than a
	// bound (Record's) to be applied, else how long the oldest has: the rules
	// keep up with the Snapshots. It is kube-proxy's ProxyHealthServer.Health
	// (what /livez answers): a failed sync counts only once its Snapshot has
	// waited past the bound, and before the first Snapshot nothing waits.
	Lag() error
	// Status is the /status document (encoded as JSON).
	Status() any
	// Collector gives the mode's metrics; cmd/svcproxy registers the mode
	// in its one registry.
	prometheus.Collector
}

// KernelPath is a kernel mode that hybrid mode can offload service ports to.
// It carries only the ports its constructor's selector accepts (hybrid's
// promoted ones), and Sync must return only once the kernel carries them:
// hybrid removes a port's portal right after.
type KernelPath interface {
	Interface
	// Connections returns, for each port in ports that snap has, the
	// cumulative number of new connections (UDP: new flows) the kernel has
	// carried for it. The count must not go down when the mode rewrites its
	// rules; a count that does (the port was re-created) is taken as a
	// counter restart.
	Connections(ctx context.Context, snap *service.Snapshot, ports PortSet) (map[service.PortName]uint64, error)
}

// FullSyncer is a mode whose syncs are sometimes full: every rule written,
// not only what changed (iptables and nftables modes; Families when its
// modes are).
type FullSyncer interface {
	// FullSyncs is how many full syncs it has made.
	FullSyncs() uint64
}

// FullSyncs is how many full syncs dp has made; 0 if it is no FullSyncer.
// cmd/svcproxy reads it before and after a sync, to tell whether the sync
// was, or waited for, a full one.
func FullSyncs(dp Interface) uint64 {
	if f, ok := dp.(FullSyncer); ok {
		return f.FullSyncs()
	}
	return 0
}

// PortSet is a set of service ports.
type PortSet map[service.PortName]bool

// Mode names, as --mode takes them and /proxyMode answers.
const (
	ModeUserspace = "userspace"
	ModeIPTables  = "iptables"
	ModeNFTables  = "nftables"
	ModeIPVS      = "ipvs"
	ModeHybrid    = "hybrid"
	// ModeSocketLB is the eBPF socket load balancer (offload/socklb): a
	// rewrite at connect() for sockets in a cgroup, nftables beside it for
	// every other packet.
	ModeSocketLB = "socklb"
)
