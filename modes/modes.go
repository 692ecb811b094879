package modes

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/hybrid"
	"github.com/svcproxy/svcproxy/hybrid/localhost"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/kernel/ipset"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/kernel/link"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/kernel/socklb/lifecycle"
	offloadiptables "github.com/svcproxy/svcproxy/offload/iptables"
	offloadipvs "github.com/svcproxy/svcproxy/offload/ipvs"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	offloadnftables "github.com/svcproxy/svcproxy/offload/nftables"
	"github.com/svcproxy/svcproxy/offload/socklb"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// Config is the mode to build and everything its paths are told: what
// svcproxy's flags (or a KubeProxyConfiguration) say. Errors name the flags.
type Config struct {
	// Mode is --mode: userspace, iptables, nftables, ipvs, socklb or
	// hybrid; Offload is hybrid's kernel path (--offload).
	Mode, Offload string
	// Host is the node, in both families: each family's paths get
	// Host.Node.
	Host dataplane.Host
	// Promoter is hybrid's (--promote-conn-rate, --promote-after,
	// --demote-after).
	Promoter hybrid.PromoterConfig
	// IPVSScheduler and IPVSStrictARP are IPVS mode's (--ipvs-scheduler,
	// --ipvs-strict-arp).
	IPVSScheduler string
	IPVSStrictARP bool
	// SocketLB is where the node's socket LB lives (--socklb-cgroup,
	// --socklb-pin-path).
	SocketLB lifecycle.Config
	// ProxyPortRange, UDPIdleTimeout and UDPMaxSessions are the userspace
	// proxier's (--proxy-port-range, --udp-idle-timeout, --udp-max-sessions).
	ProxyPortRange string
	UDPIdleTimeout time.Duration
	UDPMaxSessions int
	// SyncPeriod is every path's --sync-period; ShutdownGrace is how long
	// the userspace listeners let open connections finish (--shutdown-grace).
	SyncPeriod, ShutdownGrace time.Duration
	// FullSyncPeriod is the rule paths' --full-sync-period (0: their
	// default, kube-proxy's hour).
	FullSyncPeriod time.Duration
	// Logger gets what is not an error: fallbacks, what a mode leaves out.
	// Nil: slog.Default().
	Logger *slog.Logger
}

// New builds the dataplane of cfg.Mode in the current network namespace:
// Config in, one dataplane.Interface out. It is one dataplane per IP family
// the node serves (dataplane.Families: IPv4, and IPv6 where the namespace has
// it), as kube-proxy runs one proxier per family; each is the New of its
// mode's package, given a Config mapped from cfg.
func New(cfg Config) (dataplane.Interface, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger
	mode, kernel := cfg.Mode, kernelMode(cfg.Mode, false, log)
	if mode == dataplane.ModeHybrid {
		kernel = kernelMode(cfg.Offload, true, log)
	} else {
		mode = kernel
	}
	if kernel == dataplane.ModeIPTables || kernel == dataplane.ModeNFTables || kernel == dataplane.ModeSocketLB {
		warnLoopbackNodeIPs(cfg.Host, log)
	}
	// The socket LB's programs and maps are one per node (per cgroup), shared
	// by both families' dataplanes; pinned, they outlive the process. A mode
	// without them removes what an earlier svcproxy pinned, or it would go on
	// rewriting connect() from maps nobody updates.
	var lb *ksocklb.Kernel
	if kernel == dataplane.ModeSocketLB {
		if err := knft.Available(); err != nil {
			return nil, fmt.Errorf("--mode socklb: the nftables path beside the socket LB needs nft: %w", err)
		}
		var err error
		if lb, err = lifecycle.Open(cfg.SocketLB); err != nil {
			return nil, err
		}
	} else {
		lifecycle.RemoveLeftover(cfg.SocketLB, mode)
	}
	var dps [2]dataplane.Interface
	for _, fam := range servedFamilies(mode, log) {
		dp, err := newFamily(&cfg, fam, lb).build(mode, kernel)
		if err != nil {
			if lb != nil {
				lb.Close()
			}
			return nil, fmt.Errorf("%s: %w", fam, err)
		}
		dps[map[service.Family]int{service.IPv4: 0, service.IPv6: 1}[fam]] = dp
	}
	return dataplane.NewFamilies(dps[0], dps[1])
}

// kernelMode is the kernel mode that runs for mode (--mode, or hybrid's
// --offload): IPVS or nftables on a kernel (or a machine without nft) that
// lacks it falls back to iptables, as kube-proxy does, with one logged reason.
func kernelMode(mode string, hybrid bool, log *slog.Logger) string {
	what := "running iptables mode instead"
	if hybrid {
		what = "hybrid mode offloads to iptables instead"
	}
	available := map[string]func() error{dataplane.ModeIPVS: offloadipvs.Available, dataplane.ModeNFTables: knft.Available}[mode]
	if available == nil {
		return mode
	}
	if err := available(); err != nil {
		log.Warn(map[string]string{dataplane.ModeIPVS: "IPVS", dataplane.ModeNFTables: "nftables"}[mode]+" not available, "+what, "reason", err)
		return dataplane.ModeIPTables
	}
	return mode
}

// family is what the paths of one IP family are built from: cfg, the node
// as the family sees it, the family's iptables (portals, masquerade rules),
// and the node's socket LB where the mode runs it.
type family struct {
	cfg   *Config
	log   *slog.Logger
	node  dataplane.Node
	ports dataplane.NodePorts
	ipt   kiptables.Interface
	lb    *ksocklb.Kernel
	err   error
}

func newFamily(cfg *Config, fam service.Family, lb *ksocklb.Kernel) *family {
	f := &family{cfg: cfg, log: cfg.Logger, lb: lb}
	f.node, f.ports, f.err = cfg.Host.Node(fam)
	if f.err == nil {
		f.ipt, f.err = kiptables.New(kiptables.Config{Family: kiptables.Family(fam)})
	}
	return f
}

// build is the mode of the family: userspace, hybrid over the kernel mode, or
// the kernel mode alone (with the localhost NodePort listeners beside
// nftables when --nodeport-addresses names loopback).
func (f *family) build(mode, kernel string) (dataplane.Interface, error) {
	if f.err != nil {
		return nil, f.err
	}
	switch mode {
	case dataplane.ModeUserspace:
		uc, err := f.userspace()
		if err != nil {
			return nil, err
		}
		return userspace.New(uc)
	case dataplane.ModeHybrid:
		uc, err := f.userspace()
		if err != nil {
			return nil, err
		}
		m, err := hybrid.New(hybrid.Config{Node: f.node, Userspace: uc,
			Kernel: func(carries func(service.PortName) bool) (dataplane.KernelPath, error) {
				return f.kernelPath(kernel, carries)
			},
			Promoter: f.cfg.Promoter,
			Logger:   f.log.With("ipFamily", string(f.node.Family)),
		})
		if err != nil {
			return nil, fmt.Errorf("--promote-conn-rate, --promote-after, --demote-after: %w", err)
		}
		return m, nil
	}
	dp, err := f.kernelPath(mode, nil)
	if err != nil || !f.ports.Loopback || mode == dataplane.ModeIPTables || mode == dataplane.ModeIPVS {
		return dp, err
	}
	return localhost.New(localhost.Config{Node: f.node, Kernel: dp, ShutdownGrace: f.cfg.ShutdownGrace, Logger: f.log})
}

// userspace is the userspace proxier of the family: its listeners bind
// 0.0.0.0 or ::, its portals go to iptables or ip6tables.
func (f *family) userspace() (userspace.Config, error) {
	pr, err := userspace.ParsePortRange(f.cfg.ProxyPortRange)
	if err != nil {
		return userspace.Config{}, fmt.Errorf("--proxy-port-range: %w", err)
	}
	return userspace.Config{Node: f.node, PortRange: pr, UDPIdleTimeout: f.cfg.UDPIdleTimeout, UDPMaxSessions: f.cfg.UDPMaxSessions,
		ShutdownGrace: f.cfg.ShutdownGrace, IPTables: f.ipt, Conntrack: conntrack.Netlink{}, Logger: f.log.With("component", "userspace")}, nil
}

// kernelPath builds kernel mode mode for the family, carrying the ports
// carries accepts (hybrid's promoted ones, with connection counters then);
// nil: every port.
func (f *family) kernelPath(mode string, carries func(service.PortName) bool) (dataplane.KernelPath, error) {
	f.warnNodePorts(mode)
	node, count := f.node, carries != nil
	periods := kernelsync.Periods{Conntrack: conntrack.Netlink{}, SyncPeriod: f.cfg.SyncPeriod, FullSyncPeriod: f.cfg.FullSyncPeriod}
	switch mode {
	case dataplane.ModeIPTables:
		return offloadiptables.New(offloadiptables.Config{Node: node, Carries: carries, CountConnections: count,
			IPTables: f.ipt, Periods: periods})
	case dataplane.ModeNFTables:
		nft, err := knft.NewFamily(offloadnftables.TableFamily(node.Family), offloadnftables.Table)
		if err != nil {
			return nil, err
		}
		// The localhost listeners run in nftables mode only, not in hybrid's:
		// there the userspace NodePort listeners, bound to every address,
		// answer on loopback already.
		return offloadnftables.New(offloadnftables.Config{Node: node, Carries: carries, CountConnections: count,
			LocalhostNodePorts: f.ports.Loopback && carries == nil, NFT: nft, Periods: periods})
	case dataplane.ModeSocketLB:
		beside, err := f.kernelPath(dataplane.ModeNFTables, carries)
		if err != nil {
			return nil, fmt.Errorf("nftables beside the socket LB: %w", err)
		}
		return socklb.New(socklb.Config{Node: node, Carries: carries, LB: f.lb, Beside: beside, SyncPeriod: f.cfg.SyncPeriod})
	case dataplane.ModeIPVS:
		ic, err := f.ipvs()
		if err != nil {
			return nil, err
		}
		ic.Carries, ic.SyncPeriod = carries, f.cfg.SyncPeriod
		ic.Sysctls, ic.Conntrack, ic.StrictARP, ic.Scheduler = link.ProcSys{}, conntrack.Netlink{}, f.cfg.IPVSStrictARP, f.cfg.IPVSScheduler
		ic.Logger = f.log.With("component", "ipvs", "ipFamily", string(node.Family))
		return offloadipvs.New(ic)
	}
	return nil, fmt.Errorf("--mode %s: not built yet", mode)
}

// ipvs is the kernel IPVS mode of the family needs: IPVS, the links, and for
// masquerading the family's iptables and the ip sets. NodePorts are virtual
// servers on every address --nodeport-addresses names, or on every address of
// the namespace (as before the flag) when it says all.
func (f *family) ipvs() (offloadipvs.Config, error) {
	c := offloadipvs.Config{Node: f.node, IPTables: f.ipt}
	if f.ports.All {
		addrs, err := dataplane.Host{}.Addrs(offloadipvs.DefaultInterface)
		if err != nil {
			return c, err
		}
		c.NodePortIPs = addrs
	}
	var err error
	if c.IPVS, err = kipvs.New(); err != nil {
		return c, fmt.Errorf("ipvs: %w", err)
	}
	if c.Links, err = link.New(); err != nil {
		return c, fmt.Errorf("links: %w", err)
	}
	c.IPSets, err = ipset.New()
	return c, err
}

// warnNodePorts says what a kernel mode cannot do of --nodeport-addresses:
// the kernel paths never answer NodePorts on loopback (docs/operations.md:
// route_localnet), nftables mode serves them with its localhost listeners
// instead; and iptables mode cannot express no address at all.
func (f *family) warnNodePorts(mode string) {
	fam := string(f.node.Family)
	if f.ports.Loopback && mode != dataplane.ModeNFTables && mode != dataplane.ModeSocketLB {
		f.log.Warn("--nodeport-addresses: loopback NodePorts are served in nftables mode only; this mode leaves them out",
			"mode", mode, "ipFamily", fam)
	}
	if f.node.NoNodePorts && mode == dataplane.ModeIPTables {
		f.log.Warn("--nodeport-addresses matches no address of this family; this mode cannot express none, so its NodePorts answer on every address",
			"mode", mode, "ipFamily", fam)
	}
}

// warnLoopbackNodeIPs says, once, that the kernel paths give a loopback --node-ip
// no NodePort rule, and why (docs/operations.md).
func warnLoopbackNodeIPs(h dataplane.Host, log *slog.Logger) {
	for _, a := range h.IPs {
		if a.Unmap().IsLoopback() {
			log.Warn("--node-ip: no NodePorts on a loopback address: a DNATed packet from 127.0.0.0/8 needs route_localnet, which svcproxy never sets (CVE-2020-8558); use the node's own address",
				"addr", a.String())
		}
	}
}
