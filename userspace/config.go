package userspace

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// Defaults of Config.
const (
	// DefaultUDPIdleTimeout is kube-proxy's --udp-timeout default (250ms): a UDP
	// session with no traffic for that long is closed.
	DefaultUDPIdleTimeout = 250 * time.Millisecond
	// DefaultShutdownGrace is how long Run lets open connections finish after its
	// context is cancelled.
	DefaultShutdownGrace = 5 * time.Second
	// DefaultUDPMaxSessions is how many UDP sessions a listener holds at most:
	// kube-proxy's --conntrack-max-per-core default, the number of flows its
	// kernel paths are sized for per core. Each session is a socket: the file
	// limit may bind first (see Proxier.FDExhausted).
	DefaultUDPMaxSessions = 32768
)

// Config configures userspace mode and its Proxier. The zero value is
// usable: IPv4, listeners on kernel-chosen ports of 0.0.0.0, no portals, the
// wall clock.
type Config struct {
	// Node is the node served. Of its fields the Proxier reads:
	//   - Family: IPv4 (also when empty) or IPv6. A dual-stack node runs one
	//     Proxier per family, each fed its family's view of the Snapshot and
	//     given its family's IPTables (ip6tables for IPv6). An IPv6
	//     Proxier's listeners are IPv6-only sockets, so both families'
	//     listeners may have the same port.
	//   - NodeName: an endpoint on this node is local. The traffic policies
	//     apply as in the kernel paths: internalTrafficPolicy Local sends
	//     what comes in through a ClusterIP to the local endpoints only,
	//     externalTrafficPolicy Local does the same for the node port,
	//     external IPs and load-balancer IPs (service.Port.Categorize,
	//     kube-proxy's CategorizeEndpoints). With no local endpoint (but some
	//     elsewhere) the ClusterIPs are dropped by the portals, as kube-proxy
	//     drops them, and an external connection is reset (the kernel paths
	//     drop it).
	//   - ClusterCIDR: the pods' addresses. External traffic from a pod, or
	//     from the node itself, goes to every usable endpoint even with
	//     externalTrafficPolicy Local, as kube-proxy short-circuits it: only
	//     traffic from outside the cluster is kept on the node.
	//   - NodeIP: a LoadBalancer whose loadBalancerSourceRanges hold it also
	//     accepts its own IPs as sources (service.FirewallSources).
	// NodePorts listen on every address (BindAddress); the masquerade fields
	// are the kernel paths'.
	dataplane.Node

	// Carries, if not nil, names the service ports whose new connections
	// this Proxier takes: the others get no portal (and no REJECT rule),
	// hybrid mode having promoted them to a kernel path, whose rules then
	// decide alone. Their listeners stay open, so a connection a portal
	// brought in before finishes here (conntrack keeps sending it to the
	// listener); so do their NodePort listeners, which a kernel DNAT of the
	// node port passes by. Call ApplyPortals after its answer changes.
	Carries func(service.PortName) bool

	// BindAddress is the address the listeners bind, of Family. If invalid (the
	// zero netip.Addr), 0.0.0.0 (:: for IPv6): REDIRECT sends packets to the
	// address of the interface they came in on (127.0.0.1 or ::1 for the node's
	// own packets), so only a wildcard listener is reached from everywhere.
	BindAddress netip.Addr

	// PortRange is where listener ports come from (--proxy-port-range). The zero
	// value lets the kernel choose.
	PortRange PortRange

	// UDPIdleTimeout closes a UDP session after this much silence. If zero,
	// DefaultUDPIdleTimeout.
	UDPIdleTimeout time.Duration

	// UDPMaxSessions is how many UDP sessions (client addresses) each UDP
	// listener holds at most; a new client beyond it ends the session idle
	// longest. If zero, DefaultUDPMaxSessions.
	UDPMaxSessions int

	// ShutdownGrace is how long Run, when its context ends, lets open connections
	// finish before closing them. If zero, DefaultShutdownGrace.
	ShutdownGrace time.Duration

	// IPTables receives the portals. If nil, no portals are installed: clients must
	// connect to the listeners themselves (Status says where they are).
	IPTables iptables.Interface

	// NetNS runs fn where the proxier's sockets and iptables calls belong. If nil,
	// fn is called directly (svcproxy runs inside the namespace it serves). Tests
	// pass netnstest.NS.Do: a socket made inside keeps its namespace, and so do the
	// iptables processes started from that thread.
	NetNS func(fn func() error) error

	// Clock drives session affinity. If nil, the wall clock.
	Clock Clock

	// Conntrack, if not nil, deletes the UDP conntrack entries of a port
	// whose portal became a REJECT, so that a client that keeps sending is
	// refused instead of kept on the listener (see clearRejected). If nil,
	// those entries stay until their client goes quiet.
	Conntrack conntrack.Interface

	// Logger receives what happens away from any caller: running out of file
	// descriptors (at most one line per 10s), endpoints refused as loops. If
	// nil, nothing is logged.
	Logger *slog.Logger

	// LocalhostNodePorts makes the Proxier serve only the TCP node ports, on
	// BindAddress (the family's loopback address, 127.0.0.1 or ::1), with no
	// listener per service port and no portals: nftables mode's localhost
	// NodePorts (KEP-6032; kube-proxy's pkg/proxy/localnodeportproxy,
	// whose nftables table rejects the other protocols there). A node port
	// has a listener only while it has an endpoint to send to, for
	// externalTrafficPolicy Local one on this node (kube-proxy's
	// SyncNodePorts skips a NodePort without endpoints): without one the
	// connection is refused. Its traffic is external, and a Local policy
	// holds for it although it comes from the node itself: kube-proxy's
	// localhost proxy picks from the local endpoints too.
	LocalhostNodePorts bool

	// DialTimeouts are the timeouts of successive attempts to reach an endpoint of
	// a TCP service port; each attempt may pick another endpoint. If nil,
	// kube-proxy's tryConnect timeouts: 250ms, 500ms, 1s, 2s.
	DialTimeouts []time.Duration

	// LagBound is how long a Snapshot may wait to be served before the
	// mode's Healthy fails (dataplane.Record; 0: the default).
	LagBound time.Duration
}

// carries reports whether the Proxier takes name's new connections
// (Config.Carries).
func (c *Config) carries(name service.PortName) bool { return c.Carries == nil || c.Carries(name) }

// kube-proxy's tryConnect (pkg/proxy/userspace/proxysocket.go): 250ms, 500ms, 1s, 2s.
var defaultDialTimeouts = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}
