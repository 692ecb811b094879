// Package ruletest holds the test tables that the two rule-writing kernel
// paths, offload/iptables and offload/nftables, share: where a packet goes
// (kube-proxy's tracePacket questions), what partial syncs, failures and
// restarts leave, what the connection counters say, and on the real kernel
// what real packets do. Run and RunKernel (suite.go) hold the list of them;
// each path calls them once (its TestShared and TestKernelShared) with its
// own Fake and that Fake's packet tracer (kernel/iptables, kernel/nftables)
// behind Path, and its own mode in offloadtest's namespaces behind
// KernelPath. Its other tests are its own: golden texts of what only it
// renders, the rules' names, what one path does and the other does not.
//
// The cluster is servicetest's: this node st.ThisNode at 198.19.0.1 (IPv6:
// 2001:db8:19::1), pods in 198.19.1.0/24 (2001:db8:19::1:0/112), Services in
// 198.18.0.0/16 (2001:db8:18::/112).
package ruletest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The test cluster's addresses.
var (
	NodeIP    = netip.MustParseAddr("198.19.0.1")
	PodIP     = netip.MustParseAddr("198.19.1.50")  // a client pod on this node
	OutsideIP = netip.MustParseAddr("198.19.200.7") // a client outside the cluster

	NodeIP6    = netip.MustParseAddr("2001:db8:19::1")
	PodIP6     = netip.MustParseAddr("2001:db8:19::1:50")
	OutsideIP6 = netip.MustParseAddr("2001:db8:19::200:7")
)

// ClusterCIDR is the pod network of family (IPv4 when empty).
func ClusterCIDR(family service.Family) netip.Prefix {
	if family == service.IPv6 {
		return netip.MustParsePrefix("2001:db8:19::1:0/112")
	}
	return netip.MustParsePrefix("198.19.1.0/24")
}

// Path makes a rule-writing path's mode on a new Fake.
type Path interface {
	// New returns a Rig: a mode of this node (st.ThisNode, its pods in
	// ClusterCIDR of the family) as o says, on a new, empty Fake of o's
	// family on which the node's address (NodeIP or NodeIP6) is local.
	New(t *testing.T, o Options) Rig
}

// Options are what a table sets of a Rig; the zero value is an IPv4 mode
// with kube-proxy's defaults.
type Options struct {
	Family service.Family
	// NodeIP is the node's own IP, which source ranges may hold
	// (service.FirewallSources); invalid: unknown.
	NodeIP netip.Addr
	// ClusterCIDR is the pod network; invalid: the test cluster's
	// (ClusterCIDR, or offloadtest's on the real kernel).
	ClusterCIDR netip.Prefix
	// CountConnections makes the rules count each port's new connections
	// (Rig.Connections).
	CountConnections bool
	// FullSyncPeriod, SyncPeriod, Now and Conntrack are the mode's
	// (Periods).
	FullSyncPeriod, SyncPeriod time.Duration
	Now                        func() time.Time
	Conntrack                  conntrack.Interface
}

// Node is the node o describes: st.ThisNode of o.Family, its own IP o.NodeIP,
// its pods in o.ClusterCIDR, or else in the test cluster's (ClusterCIDR) on
// a Fake and in offloadtest's lab's on the real kernel (onKernel).
func (o Options) Node(onKernel bool) dataplane.Node {
	cidr := ClusterCIDR(o.Family)
	switch {
	case o.ClusterCIDR.IsValid():
		cidr = o.ClusterCIDR
	case onKernel && o.Family == service.IPv6:
		cidr = offloadtest.ClusterCIDR6
	case onKernel:
		cidr = offloadtest.ClusterCIDR
	}
	return dataplane.Node{Family: o.Family, NodeName: st.ThisNode, NodeIP: o.NodeIP, ClusterCIDR: cidr}
}

// Periods are o's periods, clock and conntrack for the mode's Config: on
// the real kernel (onKernel) the node's conntrack, whatever o says.
func (o Options) Periods(onKernel bool) kernelsync.Periods {
	p := kernelsync.Periods{Conntrack: o.Conntrack, SyncPeriod: o.SyncPeriod, FullSyncPeriod: o.FullSyncPeriod, Now: o.Now}
	if onKernel {
		p.Conntrack = conntrack.Netlink{}
	}
	return p
}

// Traces converts a tracer's answer with convert, for Rig.TraceAll.
func Traces[T any](trs []T, err error, convert func(T) Trace) ([]Trace, error) {
	out := make([]Trace, len(trs))
	for i, tr := range trs {
		out[i] = convert(tr)
	}
	return out, err
}

// Rig is a path's mode on its Fake.
type Rig interface {
	// Sync applies snap; Resync applies the last Snapshot again (the mode's
	// periodic resync), and nothing before the first.
	Sync(ctx context.Context, snap *service.Snapshot) error
	Resync(ctx context.Context) error
	// Restart replaces the mode with a new one over the same Fake, with the
	// same Options, as a new process does: its first sync is full.
	Restart(t *testing.T)
	Health() kernelsync.Health
	// Ports is each port's status as the last sync applied it.
	Ports() []kernelsync.PortStatus
	// Connections is the mode's count of new connections per port
	// (dataplane.KernelPath's; neither path reads the Snapshot: nil).
	Connections(ctx context.Context, snap *service.Snapshot, ports dataplane.PortSet) (map[service.PortName]uint64, error)
	// Hit counts n new connections to each endpoint of port in the Fake's
	// counters, as the kernel counts packets through the rules.
	Hit(t *testing.T, port service.PortName, n uint64)
	// Dump is the Fake's state as text: what the kernel holds.
	Dump() string
	// Writes is how many times the mode wrote to the Fake (restores,
	// transactions).
	Writes() int
	// FailNext makes the next write fail, and returns what its error says.
	FailNext() string
	// Trace and TraceAll send p through the Fake's rules (the Fake's
	// tracer): the one way its Pick takes, or every way it may take.
	Trace(p Packet) (Trace, error)
	TraceAll(p Packet) ([]Trace, error)
}

// Packet is a packet to trace: from Src to Dst, arriving from outside the
// node (on eth0), or generated on it (Local). Pick chooses among random
// rules, as the tracers' Packet.Pick does.
type Packet struct {
	Proto string // "tcp" (when empty) or "udp"
	Src   netip.Addr
	Dst   netip.AddrPort
	Local bool
	Pick  int
}

// Trace is where a packet went, as both tracers tell it.
type Trace struct {
	Verdict     string         // ACCEPT, DROP or REJECT
	DNAT        netip.AddrPort // invalid when none
	Masquerade  bool
	Delivered   bool    // to this host, rather than forwarded
	Probability float64 // of this way, given the random choices on it
	// Result is the outcome on one line: "DNAT 198.19.1.10:8080, MASQUERADE".
	Result string
	// Text is the tracer's account, step by step, for failure messages.
	Text string
}

func (tr Trace) String() string { return tr.Text }

// Sync applies snap with r, failing t on an error.
func Sync(t *testing.T, r Rig, snap *service.Snapshot) {
	t.Helper()
	if err := r.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
}
