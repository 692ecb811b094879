package ipvs

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/kernel/ipset"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/kernel/link"
	"github.com/svcproxy/svcproxy/service"
)

// DefaultInterface is the dummy interface that holds the service IPs.
const DefaultInterface = "svcp-ipvs0"

// Service annotations read by this dataplane.
const (
	// SchedulerAnnotation overrides Config.Scheduler for one Service:
	// svcproxy.io/ipvs-scheduler: "sh".
	SchedulerAnnotation = "svcproxy.io/ipvs-scheduler"
	// WeightsAnnotation gives endpoint IPs weights other than 1, for the weighted
	// schedulers: svcproxy.io/ipvs-weights: "198.19.1.2=3,198.19.1.3=1".
	WeightsAnnotation = "svcproxy.io/ipvs-weights"
)

// DefaultGracePeriod bounds how long a removed TCP real server drains at weight 0
// before it is deleted even with connections left. kube-proxy waits for them without a
// bound; a forgotten long-lived connection would keep a dead pod's address forever.
const DefaultGracePeriod = 5 * time.Minute

// DefaultNodePortRange is the API server's default --service-node-port-range.
var DefaultNodePortRange = [2]uint16{30000, 32767}

// Config configures IPVS mode.
type Config struct {
	// Node is the node served. Family: IPVS, the dummy interface and the ip
	// sets are shared by both families of a dual-stack node; each family's
	// Dataplane adds, retires and removes only virtual servers and addresses
	// of its own family, so the other's are safe. NodePortIPs are the node
	// addresses NodePort virtual servers listen on: IPVS needs one per
	// address, so empty means no NodePort virtual servers (the program
	// lists every address for --nodeport-addresses all). ClusterCIDR: traffic
	// to a ClusterIP from outside it is masqueraded, so replies come back
	// through this node; invalid: not masqueraded (unless MasqueradeAll), as
	// kube-proxy does without --cluster-cidr.
	dataplane.Node
	// Carries chooses the service ports this dataplane carries (hybrid mode
	// offloads hot ports only). If nil, every port.
	Carries func(service.PortName) bool

	// IPVS and Links are the kernel, in the node's network namespace. Required.
	IPVS  kipvs.Interface
	Links link.Interface

	// Interface is the dummy interface for service IPs. If empty, DefaultInterface.
	Interface string
	// Scheduler is the default scheduler, one of kipvs.Schedulers. If empty, "rr".
	Scheduler string
	// NodePortRange is the range of NodePorts: a virtual server on a node IP with a
	// port in it is svcproxy's. If zero, DefaultNodePortRange.
	NodePortRange [2]uint16
	// GracePeriod bounds the draining of a removed TCP or SCTP real server. If zero,
	// DefaultGracePeriod.
	GracePeriod time.Duration
	// Now is the clock for draining. If nil, time.Now.
	Now func() time.Time

	// IPTables and IPSets carry the masquerade rules (masq.go): a few fixed rules in
	// nat chains of ours, matching ip sets of service addresses. If either is nil,
	// svcproxy adds no iptables rules and nothing is masqueraded. IPTables is the
	// family's (ip6tables for IPv6); the IPv6 sets are "SVCP-6-IPVS-...".
	IPTables kiptables.Interface
	IPSets   ipset.Interface

	// Sysctls, if not nil, get the parameters IPVS mode needs (kube-proxy's):
	// net.ipv4.vs.conntrack=1 when masquerading (so IPVS traffic passes netfilter's
	// nat POSTROUTING), expire_nodest_conn=1 and expire_quiescent_template=1 (a
	// deleted or drained real server loses its connections and persistence
	// templates). Only ever the node's namespace.
	Sysctls link.Sysctls
	// Conntrack deletes the UDP conntrack entries a sync leaves stale
	// (conntrack.go). If nil, there is no conntrack cleanup.
	Conntrack conntrack.Interface
	// Logger gets the failures of the conntrack cleanup, which do not fail
	// a sync. If nil, they are only counted (Dataplane.Conntrack).
	Logger *slog.Logger

	// StrictARP sets net.ipv4.conf.all.arp_ignore=1 and arp_announce=2, so the node
	// does not answer ARP for the service IPs on its dummy interface (needed when
	// a load balancer such as MetalLB announces them).
	StrictARP bool

	// SyncPeriod is how long after a sync the next one comes without a change
	// (default 30s); LagBound is the Syncer's (0: twice SyncPeriod).
	SyncPeriod time.Duration
	LagBound   time.Duration
}

// Dataplane is --mode ipvs, and hybrid mode's IPVS path: it reconciles
// Snapshots into IPVS (reconcile, sync.go), driven by the lifecycle every
// kernel mode shares (dataplane.Syncer, which gives it Mode, Sync, Run and
// Healthy), which also resyncs every second while real servers drain (a
// drain ends only at a sync). IPVS has no rules to render and diff, so it
// needs none of offload/kernelsync's full and partial syncs. When its context
// ends the virtual servers stay: traffic keeps flowing while svcproxy
// restarts, and the next process adopts them. Its methods are safe for
// concurrent use; syncs are serialised.
type Dataplane struct {
	*dataplane.Syncer
	cfg Config

	mu sync.Mutex
	// draining holds when each real server being drained got weight 0, to bound the
	// drain. A restart forgets it; the drain then starts again at the next Sync.
	draining map[realKey]time.Time
	// sysctlsDone: the sysctls were set once; they are not re-checked every Sync.
	sysctlsDone bool
	// served is the UDP selection (staleSelection's frontends) that the last
	// conntrack cleanup saw; reconciled, whether its walk of the table is
	// done and succeeded; ctStats counts (conntrack.go).
	served     map[netip.AddrPort][]netip.Addr
	reconciled bool
	ctStats    ConntrackStats
	// restoreFailures counts the masquerade rules' iptables-restore runs
	// that failed (kube-proxy's IPTablesRestoreFailuresTotal in ipvs mode).
	restoreFailures atomic.Uint64
	// conntrackDuration times each conntrack cleanup (kube-proxy's
	// ReconcileConntrackFlowsLatency).
	conntrackDuration prometheus.Histogram
}

var _ dataplane.KernelPath = (*Dataplane)(nil)

type realKey struct {
	vs   kipvs.Key
	addr netip.AddrPort
}

// New checks cfg, fills in its defaults and returns the IPVS mode of cfg;
// cfg.Carries restricts it to some ports (hybrid's promoted ones).
func New(cfg Config) (*Dataplane, error) {
	if cfg.IPVS == nil || cfg.Links == nil {
		return nil, errors.New("offload/ipvs: config: IPVS and Links are required")
	}
	if err := cfg.Node.Check(); err != nil {
		return nil, fmt.Errorf("offload/ipvs: config: %w", err)
	}
	if cfg.Interface == "" {
		cfg.Interface = DefaultInterface
	}
	if cfg.Scheduler == "" {
		cfg.Scheduler = "rr"
	}
	if !kipvs.ValidScheduler(cfg.Scheduler) {
		return nil, fmt.Errorf("offload/ipvs: config: scheduler %q: not one of %v", cfg.Scheduler, kipvs.Schedulers)
	}
	if cfg.NodePortRange == [2]uint16{} {
		cfg.NodePortRange = DefaultNodePortRange
	}
	if cfg.NodePortRange[0] > cfg.NodePortRange[1] {
		return nil, fmt.Errorf("offload/ipvs: config: node port range %d-%d: empty", cfg.NodePortRange[0], cfg.NodePortRange[1])
	}
	if cfg.GracePeriod == 0 {
		cfg.GracePeriod = DefaultGracePeriod
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	for _, ip := range cfg.NodePortIPs {
		if ip.Is4In6() {
			return nil, fmt.Errorf("offload/ipvs: config: node IP %s: not an IPv4 or IPv6 address", ip)
		}
	}
	// NodePorts answer on the node addresses of the family (a dual-stack
	// node's other family has a Dataplane of its own).
	cfg.NodePortIPs = cfg.Family.Addrs(cfg.NodePortIPs)
	d := &Dataplane{cfg: cfg, draining: map[realKey]time.Time{},
		conntrackDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubeproxy_conntrack_reconciler_sync_duration_seconds",
			Help:    "ReconcileConntrackFlowsLatency latency in seconds: the stale UDP conntrack cleanup after a sync",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		})}
	d.Syncer = dataplane.NewSyncer(dataplane.SyncerConfig{
		Mode:     dataplane.ModeIPVS,
		Apply:    d.reconcile,
		Period:   cfg.SyncPeriod,
		Pending:  func() bool { return d.Draining() > 0 },
		LagBound: cfg.LagBound,
		NodeName: cfg.NodeName,
	})
	return d, nil
}

// Available returns nil when the kernel has IPVS, else the reason, for the one log
// line of the fallback to iptables mode.
func Available() error { return kipvs.Available() }
