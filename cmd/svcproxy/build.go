package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

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
	offloadnftables "github.com/svcproxy/svcproxy/offload/nftables"
	"github.com/svcproxy/svcproxy/offload/socklb"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// newDataplane builds the dataplane of cfg.Mode in the current network
// namespace: Config in, one dataplane.Interface out. It is one dataplane per
// IP family the node serves (dataplane.Families: IPv4, and IPv6 where the
// namespace has it), as kube-proxy runs one proxier per family. Each mode's
// lifecycle lives in its own package.
func newDataplane(cfg *Config, log *slog.Logger) (dataplane.Interface, error) {
	mode, offloadMode := cfg.Mode, cfg.Offload
	if mode == dataplane.ModeHybrid {
		offloadMode = kernelMode(offloadMode, true, log)
	} else {
		mode = kernelMode(mode, false, log)
	}
	if kernel := map[bool]string{true: offloadMode, false: mode}[mode == dataplane.ModeHybrid]; kernel == dataplane.ModeIPTables || kernel == dataplane.ModeNFTables || kernel == dataplane.ModeSocketLB {
		warnLoopbackNodeIPs(cfg, log)
	}
	// The socket LB's programs and maps are one per node (per cgroup), shared
	// by both families' dataplanes; pinned, they outlive the process. A mode
	// without them removes what an earlier svcproxy pinned, or it would go on
	// rewriting connect() from maps nobody updates.
	var lb *ksocklb.Kernel
	if usesSocketLB(mode, offloadMode) {
		k, err := openSocketLB(cfg, log)
		if err != nil {
			return nil, err
		}
		lb = k
	} else {
		lifecycle.RemoveLeftover(socketLBPlace(cfg, log), mode)
	}
	var dps [2]dataplane.Interface
	for i, fam := range servedFamilies(mode, log) {
		dp, err := familyDataplane(cfg, fam, mode, offloadMode, lb, log)
		if err != nil {
			if lb != nil {
				lb.Close()
			}
			return nil, fmt.Errorf("%s: %w", fam, err)
		}
		if fam == service.IPv6 {
			i = 1
		}
		dps[i] = dp
	}
	return dataplane.NewFamilies(dps[0], dps[1])
}

// familyDataplane builds the dataplane of one IP family: the single-stack
// code of the mode, with the family's iptables binary and addresses (and lb,
// the node's socket LB, in the modes that use it).
func familyDataplane(cfg *Config, fam service.Family, mode, offloadMode string, lb *ksocklb.Kernel, log *slog.Logger) (dataplane.Interface, error) {
	ipt, err := kiptables.New(kiptables.Config{Family: kiptables.Family(fam)})
	if err != nil {
		return nil, err
	}
	switch mode {
	case dataplane.ModeUserspace:
		uc, err := userspaceConfig(cfg, fam, ipt, log)
		if err != nil {
			return nil, err
		}
		return userspace.New(uc)
	case dataplane.ModeNFTables, dataplane.ModeSocketLB:
		dp, err := kernelPath(cfg, fam, mode, ipt, lb, nil, log)
		if err != nil {
			return nil, err
		}
		if np, err := cfg.nodePortFamily(fam); err != nil || !np.Loopback {
			return dp, err
		}
		return localhost.New(localhost.Config{NFTables: dp, Family: fam, NodeName: cfg.NodeName,
			ClusterCIDR: cfg.clusterCIDR(fam), ShutdownGrace: cfg.ShutdownGrace, Logger: log})
	case dataplane.ModeIPTables, dataplane.ModeIPVS:
		return kernelPath(cfg, fam, mode, ipt, nil, nil, log)
	case dataplane.ModeHybrid:
		uc, err := userspaceConfig(cfg, fam, ipt, log)
		if err != nil {
			return nil, err
		}
		m, err := hybrid.New(hybrid.Config{
			Userspace: uc,
			Kernel: func(carried func(service.PortName) bool) (dataplane.KernelPath, error) {
				return kernelPath(cfg, fam, offloadMode, ipt, lb, carried, log)
			},
			Promoter: hybrid.PromoterConfig{PromoteConnRate: cfg.PromoteConnRate, PromoteAfter: cfg.PromoteAfter, DemoteAfter: cfg.DemoteAfter},
			Logger:   log.With("ipFamily", string(fam)),
		})
		if err != nil {
			return nil, fmt.Errorf("--promote-conn-rate, --promote-after, --demote-after: %w", err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("--mode %s: not built yet", mode)
}

// kernelMode is the kernel mode that runs for mode (--mode, or hybrid's
// --offload): IPVS or nftables on a kernel (or a machine without nft) that
// lacks it falls back to iptables, as kube-proxy does, with one logged reason.
func kernelMode(mode string, hybrid bool, log *slog.Logger) string {
	what := "running iptables mode instead"
	if hybrid {
		what = "hybrid mode offloads to iptables instead"
	}
	switch mode {
	case dataplane.ModeIPVS:
		if err := offloadipvs.Available(); err != nil {
			log.Warn("IPVS not available, "+what, "reason", err)
			return dataplane.ModeIPTables
		}
	case dataplane.ModeNFTables:
		if err := knft.Available(); err != nil {
			log.Warn("nftables not available, "+what, "reason", err)
			return dataplane.ModeIPTables
		}
	}
	return mode
}

// kernelPath builds the kernel dataplane of mode for family fam, restricted to
// the ports carried accepts when it is not nil.
func kernelPath(cfg *Config, fam service.Family, mode string, ipt kiptables.Interface, lb *ksocklb.Kernel, carried func(service.PortName) bool, log *slog.Logger) (dataplane.KernelPath, error) {
	switch mode {
	case dataplane.ModeSocketLB:
		return socketLBPath(cfg, fam, lb, carried, log)
	case dataplane.ModeIPVS:
		return ipvsPath(cfg, fam, ipt, carried, log)
	case dataplane.ModeNFTables:
		return nftablesPath(cfg, fam, carried, log)
	}
	var include func(*service.Port) bool
	if carried != nil {
		include = func(p *service.Port) bool { return carried(p.Name) }
	}
	np, err := kernelNodePorts(cfg, fam, mode, log)
	if err != nil {
		return nil, err
	}
	return offloadiptables.NewDataplane(offloadiptables.ProxierConfig{
		Rules: offloadiptables.Config{
			Family:        fam,
			NodeName:      cfg.NodeName,
			NodeIPs:       np.Addrs,
			NodeIP:        primaryNodeIP(cfg, fam),
			ClusterCIDR:   cfg.clusterCIDR(fam),
			MasqueradeAll: cfg.MasqueradeAll,
			Include:       include,
		},
		IPTables:         ipt,
		Conntrack:        conntrack.Netlink{},
		SyncPeriod:       cfg.SyncPeriod,
		CountConnections: carried != nil,
	}, 0)
}

// nftablesPath builds nftables mode (offload/nftables) for family fam, in its
// own table (`ip svcproxy` or `ip6 svcproxy`), restricted to the ports carried
// accepts when it is not nil, with per-port connection counters then. Without
// carried (nftables mode), a loopback --nodeport-addresses makes the table
// reject the UDP and SCTP NodePorts on loopback (familyDataplane adds the
// TCP listeners: package hybrid/localhost).
func nftablesPath(cfg *Config, fam service.Family, carried func(service.PortName) bool, log *slog.Logger) (dataplane.KernelPath, error) {
	nft, err := knft.NewFamily(offloadnftables.TableFamily(fam), offloadnftables.Table)
	if err != nil {
		return nil, err
	}
	np, err := kernelNodePorts(cfg, fam, dataplane.ModeNFTables, log)
	if err != nil {
		return nil, err
	}
	var include func(*service.Port) bool
	if carried != nil {
		include = func(p *service.Port) bool { return carried(p.Name) }
	}
	return offloadnftables.NewDataplane(offloadnftables.ProxierConfig{
		Rules: offloadnftables.Config{
			Family:      fam,
			NodeName:    cfg.NodeName,
			NodeIPs:     np.Addrs,
			NodeIP:      primaryNodeIP(cfg, fam),
			NoNodePorts: !np.All && len(np.Addrs) == 0,
			// The localhost listeners run in nftables mode only, not in
			// hybrid's: there the userspace NodePort listeners, bound to
			// every address, answer on loopback already.
			LocalhostNodePorts: np.Loopback && carried == nil,
			ClusterCIDR:        cfg.clusterCIDR(fam),
			MasqueradeAll:      cfg.MasqueradeAll,
			Include:            include,
			CountConnections:   carried != nil,
		},
		NFT:        nft,
		Conntrack:  conntrack.Netlink{},
		SyncPeriod: cfg.SyncPeriod,
	}, 0)
}

// warnLoopbackNodeIPs says, once, that the kernel paths give a loopback --node-ip
// no NodePort rule, and why (docs/operations.md).
func warnLoopbackNodeIPs(cfg *Config, log *slog.Logger) {
	for _, a := range cfg.NodeIPs {
		if a.Unmap().IsLoopback() {
			log.Warn("--node-ip: no NodePorts on a loopback address: a DNATed packet from 127.0.0.0/8 needs route_localnet, which svcproxy never sets (CVE-2020-8558); use the node's own address",
				"addr", a.String())
		}
	}
}

// ipvsPath builds IPVS mode for family fam: one of the two Proxiers that share
// IPVS and the dummy interface on a dual-stack node.
func ipvsPath(cfg *Config, fam service.Family, ipt kiptables.Interface, carried func(service.PortName) bool, log *slog.Logger) (dataplane.KernelPath, error) {
	k, err := kipvs.New()
	if err != nil {
		return nil, fmt.Errorf("ipvs: %w", err)
	}
	links, err := link.New()
	if err != nil {
		return nil, fmt.Errorf("links: %w", err)
	}
	nodeIPs, err := ipvsNodePorts(cfg, fam, log)
	if err != nil {
		return nil, err
	}
	// Masquerade needs both: a few nat rules that match ip sets of the services.
	sets, err := ipset.New()
	if err != nil {
		return nil, err
	}
	return offloadipvs.New(offloadipvs.Config{
		Node:       dataplane.Node{Family: fam, NodeName: cfg.NodeName, NodePortIPs: nodeIPs, ClusterCIDR: cfg.clusterCIDR(fam), MasqueradeAll: cfg.MasqueradeAll},
		IPVS:       k,
		Links:      links,
		Scheduler:  cfg.IPVSScheduler,
		IPTables:   ipt,
		IPSets:     sets,
		Sysctls:    link.ProcSys{},
		StrictARP:  cfg.IPVSStrictARP,
		Carries:    carried,
		Conntrack:  conntrack.Netlink{},
		Logger:     log.With("component", "ipvs", "ipFamily", string(fam)),
		SyncPeriod: cfg.SyncPeriod,
	})
}

// userspaceConfig is the userspace proxier of family fam: its listeners bind
// 0.0.0.0 or ::, its portals go to iptables or ip6tables (ipt).
func userspaceConfig(cfg *Config, fam service.Family, ipt kiptables.Interface, log *slog.Logger) (userspace.Config, error) {
	pr, err := userspace.ParsePortRange(cfg.ProxyPortRange)
	if err != nil {
		return userspace.Config{}, fmt.Errorf("--proxy-port-range: %w", err)
	}
	return userspace.Config{
		Node:           dataplane.Node{Family: fam, NodeName: cfg.NodeName, NodeIP: primaryNodeIP(cfg, fam), ClusterCIDR: cfg.clusterCIDR(fam)},
		PortRange:      pr,
		UDPIdleTimeout: cfg.UDPIdleTimeout,
		UDPMaxSessions: cfg.UDPMaxSessions,
		ShutdownGrace:  cfg.ShutdownGrace,
		IPTables:       ipt,
		Conntrack:      conntrack.Netlink{},
		Logger:         log.With("component", "userspace"),
	}, nil
}

// primaryNodeIP is this node's own address of family fam
// (dataplane.Host.PrimaryIP).
func primaryNodeIP(cfg *Config, fam service.Family) netip.Addr { return cfg.host().PrimaryIP(fam) }

// cleanup removes what every mode may have left in this namespace, in both IP
// families.
func cleanup(ctx context.Context, cfg *Config) error {
	var errs []error
	for _, fam := range service.Families {
		ipt, err := kiptables.New(kiptables.Config{Family: kiptables.Family(fam)})
		if err != nil {
			if fam == service.IPv6 {
				continue // no ip6tables: there can be no IPv6 rules of ours
			}
			return err
		}
		if err := userspace.Cleanup(ctx, ipt); err != nil {
			errs = append(errs, fmt.Errorf("%s userspace portals: %w", fam, err))
		}
		if err := offloadiptables.Cleanup(ctx, ipt); err != nil {
			errs = append(errs, fmt.Errorf("%s iptables rules: %w", fam, err))
		}
		if offloadipvs.Available() == nil {
			if err := cleanupIPVS(ctx, cfg, fam, ipt); err != nil {
				errs = append(errs, fmt.Errorf("%s ipvs: %w", fam, err))
			}
		}
	}
	if err := lifecycle.Remove(cfg.SocketLBPinPath); err != nil {
		errs = append(errs, fmt.Errorf("socket LB pins in %s: %w", cfg.SocketLBPinPath, err))
	}
	if knft.Available() == nil {
		for _, fam := range service.Families {
			family := offloadnftables.TableFamily(fam)
			nft, err := knft.NewFamily(family, offloadnftables.Table)
			if err == nil {
				err = offloadnftables.Cleanup(ctx, nft)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("nftables table %s %s: %w", family, offloadnftables.Table, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cleanupIPVS removes svcproxy's virtual servers, service IPs (and, with the
// last of them, the dummy interface), masquerade rules and ip sets of family
// fam. Without the ipset tool there can be none of the last two.
func cleanupIPVS(ctx context.Context, cfg *Config, fam service.Family, ipt kiptables.Interface) error {
	k, err := kipvs.New()
	if err != nil {
		return err
	}
	defer k.Close()
	links, err := link.New()
	if err != nil {
		return err
	}
	defer links.Close()
	// The NodePort virtual servers are known by their address, a node address
	// (--nodeport-addresses), and port.
	nodeIPs, err := ipvsNodePorts(cfg, fam, nil)
	if err != nil {
		return err
	}
	pc := offloadipvs.Config{Node: dataplane.Node{Family: fam, NodePortIPs: nodeIPs}, IPVS: k, Links: links}
	if sets, err := ipset.New(); err == nil {
		pc.IPTables, pc.IPSets = ipt, sets
	}
	p, err := offloadipvs.New(pc)
	if err != nil {
		return err
	}
	return p.Cleanup(ctx)
}

// usesSocketLB says whether mode (with hybrid's offloadMode) runs the socket
// LB, whose programs and maps are one per node, shared by both families.
func usesSocketLB(mode, offloadMode string) bool {
	return mode == dataplane.ModeSocketLB || (mode == dataplane.ModeHybrid && offloadMode == dataplane.ModeSocketLB)
}

// socketLBPlace is where the flags put the node's socket LB.
func socketLBPlace(cfg *Config, log *slog.Logger) lifecycle.Config {
	return lifecycle.Config{Cgroup: cfg.SocketLBCgroup, PinPath: cfg.SocketLBPinPath, PinPathGiven: cfg.SocketLBPinPathSet, Logger: log}
}

// openSocketLB loads and attaches the node's socket LB
// (kernel/socklb/lifecycle), once nft is known to be there for the path
// beside it.
func openSocketLB(cfg *Config, log *slog.Logger) (*ksocklb.Kernel, error) {
	if err := knft.Available(); err != nil {
		return nil, fmt.Errorf("--mode socklb: the nftables path beside the socket LB needs nft: %w", err)
	}
	return lifecycle.Open(socketLBPlace(cfg, log))
}

// socketLBPath builds the socket LB of family fam: its Proxier over the
// node's maps (lb) and, beside it, nftables mode for every packet the hooks
// do not see or leave alone. Both are restricted to the ports carried accepts
// when it is not nil (hybrid mode).
func socketLBPath(cfg *Config, fam service.Family, lb *ksocklb.Kernel, carried func(service.PortName) bool, log *slog.Logger) (dataplane.KernelPath, error) {
	if lb == nil {
		return nil, errors.New("socklb: no socket LB loaded")
	}
	beside, err := nftablesPath(cfg, fam, carried, log)
	if err != nil {
		return nil, fmt.Errorf("nftables beside the socket LB: %w", err)
	}
	var include func(*service.Port) bool
	if carried != nil {
		include = func(p *service.Port) bool { return carried(p.Name) }
	}
	return socklb.NewDataplane(socklb.DataplaneConfig{
		Maps: socklb.Config{
			Family:   fam,
			NodeName: cfg.NodeName,
			LB:       lb,
			Include:  include,
		},
		Beside:     beside,
		SyncPeriod: cfg.SyncPeriod,
	})
}

// host is what the flags say of this node, in both families.
func (c *Config) host() dataplane.Host {
	return dataplane.Host{Name: c.NodeName, IPs: c.NodeIPs, NodePortAddresses: c.NodePortAddresses,
		ClusterCIDRs: c.ClusterCIDRs, MasqueradeAll: c.MasqueradeAll}
}

// nodePortFamily is cfg's --nodeport-addresses for fam on this namespace.
func (c *Config) nodePortFamily(fam service.Family) (dataplane.NodePorts, error) {
	_, np, err := c.host().Node(fam)
	return np, err
}

// kernelNodePorts is --nodeport-addresses for fam in a kernel mode (iptables,
// nftables, ipvs), with what it cannot do logged: the kernel paths never
// answer NodePorts on loopback (docs/operations.md: route_localnet); nftables
// mode serves them with its localhost listeners instead. log may be nil.
func kernelNodePorts(cfg *Config, fam service.Family, mode string, log *slog.Logger) (dataplane.NodePorts, error) {
	np, err := cfg.nodePortFamily(fam)
	if err != nil || log == nil {
		return np, err
	}
	if np.Loopback && mode != dataplane.ModeNFTables {
		log.Warn("--nodeport-addresses: loopback NodePorts are served in nftables mode only; this mode leaves them out",
			"mode", mode, "ipFamily", string(fam))
	}
	if !np.All && len(np.Addrs) == 0 && mode == dataplane.ModeIPTables {
		log.Warn("--nodeport-addresses matches no address of this family; this mode cannot express none, so its NodePorts answer on every address",
			"mode", mode, "ipFamily", string(fam))
	}
	return np, nil
}

// ipvsNodePorts are the addresses IPVS mode makes NodePort virtual servers
// on for fam: --nodeport-addresses's, or every address of the namespace (as
// before the flag) when it says all. log may be nil.
func ipvsNodePorts(cfg *Config, fam service.Family, log *slog.Logger) ([]netip.Addr, error) {
	np, err := kernelNodePorts(cfg, fam, dataplane.ModeIPVS, log)
	if err != nil {
		return nil, err
	}
	if np.All {
		return dataplane.Host{}.Addrs(offloadipvs.DefaultInterface)
	}
	return np.Addrs, nil
}
