package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/hybrid"
	"github.com/svcproxy/svcproxy/kernel/socklb/lifecycle"
	"github.com/svcproxy/svcproxy/modes"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
	"github.com/svcproxy/svcproxy/userspace"
)

// Modes of --mode (dataplane's names).
const (
	modeUserspace = dataplane.ModeUserspace
	modeIPTables  = dataplane.ModeIPTables
	modeNFTables  = dataplane.ModeNFTables
	modeIPVS      = dataplane.ModeIPVS
	modeHybrid    = dataplane.ModeHybrid
	modeSocketLB  = dataplane.ModeSocketLB
)

// Config is everything the flags say; run takes it and nothing else.
type Config struct {
	ServicesFile     string
	ServicesMaxBytes int64
	Kubeconfig       string
	Mode             string
	Offload          string
	// ModeDefaulted: --mode was not given, and Mode is its default (logged at
	// start, as kube-proxy logs a defaulted mode: logModeChoice).
	ModeDefaulted bool

	PromoteConnRate float64
	PromoteAfter    time.Duration
	DemoteAfter     time.Duration

	IPVSScheduler string
	IPVSStrictARP bool

	// SocketLBCgroup is --socklb-cgroup: the cgroup v2 directory whose
	// processes' connect() the socket LB sees; "" is the node's cgroup2 root
	// (lifecycle.DefaultCgroup).
	SocketLBCgroup string
	// SocketLBPinPath is --socklb-pin-path: the bpffs directory the socket
	// LB's maps and links are pinned in, so they outlive the process; ""
	// pins nothing. SocketLBPinPathSet: the flag was given (a default that
	// is not on a bpffs is logged and left out; a given one is an error).
	SocketLBPinPath    string
	SocketLBPinPathSet bool

	HealthzAddr string
	MetricsAddr string

	NodeName       string
	NodeIPs        []netip.Addr
	ClusterCIDRs   []netip.Prefix // at most one per IP family
	MasqueradeAll  bool
	ProxyPortRange string
	UDPIdleTimeout time.Duration
	UDPMaxSessions int
	MinSyncPeriod  time.Duration
	SyncPeriod     time.Duration
	ShutdownGrace  time.Duration

	// NodePortAddresses is --nodeport-addresses: which node addresses
	// answer NodePorts (dataplane.NodePortAddresses).
	NodePortAddresses dataplane.NodePortAddresses

	Cleanup bool
}

// parseFlags reads args into a Config, checking what can be checked before
// anything runs.
func parseFlags(args []string) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("svcproxy", flag.ContinueOnError)
	fs.StringVar(&c.ServicesFile, "services", "", "Kubernetes manifests `FILE` (Services, EndpointSlices, Endpoints, and this node's Node), reloaded when it changes")
	fs.Int64Var(&c.ServicesMaxBytes, "services-max-bytes", watch.DefaultMaxFileBytes, "refuse a --services file larger than this many `BYTES`, keeping the last good state")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "watch the API server of this kubeconfig `FILE`; without --services or --kubeconfig, the in-cluster config")
	fs.StringVar(&c.Mode, "mode", modeHybrid, "proxy mode: userspace, iptables, nftables, ipvs, socklb or hybrid")
	fs.StringVar(&c.Offload, "offload", modeNFTables, "hybrid's kernel path: nftables, ipvs, iptables or socklb (nftables and ipvs fall back to iptables where the kernel or the nft tool lacks them; socklb is the socket LB with nftables beside)")
	fs.Float64Var(&c.PromoteConnRate, "promote-conn-rate", 50, "hybrid: new connections per second that make a service port hot")
	fs.DurationVar(&c.PromoteAfter, "promote-after", 5*time.Second, "hybrid: how long the rate must hold before promotion")
	fs.DurationVar(&c.DemoteAfter, "demote-after", 5*time.Minute, "hybrid: how long a promoted port must stay quiet before it returns to userspace (0: never)")
	fs.StringVar(&c.IPVSScheduler, "ipvs-scheduler", "rr", "IPVS scheduler: rr, wrr, lc, wlc, sh, dh, sed, nq")
	fs.BoolVar(&c.IPVSStrictARP, "ipvs-strict-arp", false, "IPVS: set arp_ignore=1 and arp_announce=2, so the node does not answer ARP for service IPs (as MetalLB needs)")
	fs.StringVar(&c.SocketLBCgroup, "socklb-cgroup", "", "socklb: the cgroup v2 `DIR` whose processes' connect() to a ClusterIP is balanced by the socket LB (default "+lifecycle.DefaultCgroup+", which must then be a cgroup2 mount)")
	fs.StringVar(&c.SocketLBPinPath, "socklb-pin-path", lifecycle.DefaultPinPath, "socklb: a `DIR` on a bpffs (made if missing) where the socket LB's maps and program links are pinned, so a restart adopts them and translation never stops; \"\" pins nothing")
	fs.StringVar(&c.HealthzAddr, "healthz-bind-address", "0.0.0.0:10256", "serve /healthz here once the first sync is done")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", "127.0.0.1:10249", "serve /metrics, /proxyMode and /status here")
	fs.StringVar(&c.NodeName, "hostname-override", "", "this node's name, for traffic policy Local and the health check (default: the hostname, lower-cased)")
	nodeIPs := fs.String("node-ip", "", "this node's addresses, comma-separated: what primary in --nodeport-addresses stands for")
	nodePorts := fs.String("nodeport-addresses", "", "where NodePorts answer: CIDRs and the keywords primary (--node-ip), localhost (127.0.0.0/8, ::1/128: nftables mode serves TCP NodePorts there with userspace listeners) and all, comma-separated (default: primary with --node-ip, else all)")
	cidr := fs.String("cluster-cidr", "198.19.0.0/16,2001:db8:19::/64", "pod addresses, one CIDR per IP family, comma-separated; traffic from outside them to a ClusterIP is masqueraded")
	fs.BoolVar(&c.MasqueradeAll, "masquerade-all", false, "iptables mode: SNAT all traffic to a service")
	fs.StringVar(&c.ProxyPortRange, "proxy-port-range", "", "userspace: local ports for the listeners, `FROM-TO` (default: chosen by the kernel)")
	fs.DurationVar(&c.UDPIdleTimeout, "udp-idle-timeout", 250*time.Millisecond, "userspace: how long an idle UDP session lives (kube-proxy's default)")
	fs.IntVar(&c.UDPMaxSessions, "udp-max-sessions", userspace.DefaultUDPMaxSessions, "userspace: UDP sessions (client addresses) per listener; a new client beyond them ends the session idle longest")
	fs.DurationVar(&c.MinSyncPeriod, "min-sync-period", time.Second, "at most one sync per this interval")
	fs.DurationVar(&c.SyncPeriod, "sync-period", 30*time.Second, "at least one sync per this interval (iptables, nftables: partial, after checking that the rules are still in place)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "userspace: on SIGTERM, how long open connections may finish before they are closed")
	fs.BoolVar(&c.Cleanup, "cleanup", false, "remove every rule, virtual server, interface and address svcproxy made, then exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.ModeDefaulted = true
	fs.Visit(func(f *flag.Flag) {
		c.ModeDefaulted = c.ModeDefaulted && f.Name != "mode"
		c.SocketLBPinPathSet = c.SocketLBPinPathSet || f.Name == "socklb-pin-path"
	})
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	var errs []error
	switch c.Mode {
	case modeUserspace, modeIPTables, modeNFTables, modeIPVS, modeSocketLB, modeHybrid:
	default:
		errs = append(errs, fmt.Errorf("--mode %q: must be userspace, iptables, nftables, ipvs, socklb or hybrid", c.Mode))
	}
	switch c.Offload {
	case modeNFTables, modeIPVS, modeIPTables, modeSocketLB:
	default:
		errs = append(errs, fmt.Errorf("--offload %q: must be nftables, ipvs, iptables or socklb", c.Offload))
	}
	if c.ServicesFile != "" && c.Kubeconfig != "" {
		errs = append(errs, errors.New("--services and --kubeconfig: choose one source"))
	}
	if c.ServicesMaxBytes < 1 {
		errs = append(errs, fmt.Errorf("--services-max-bytes %d: must be at least 1", c.ServicesMaxBytes))
	}
	name, err := nodeName(c.NodeName, os.Hostname)
	if err != nil {
		errs = append(errs, err)
	}
	c.NodeName = name
	if *nodeIPs != "" {
		for _, s := range strings.Split(*nodeIPs, ",") {
			ip, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				errs = append(errs, fmt.Errorf("--node-ip %q: not an IP address", s))
				continue
			}
			c.NodeIPs = append(c.NodeIPs, ip)
		}
	}
	if c.NodePortAddresses, err = dataplane.ParseNodePortAddresses(*nodePorts, c.NodeIPs); err != nil {
		errs = append(errs, err)
	}
	if *cidr != "" {
		for _, s := range strings.Split(*cidr, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("--cluster-cidr %q: not a CIDR", s))
			case c.clusterCIDR(service.FamilyOf(p.Addr())).IsValid():
				errs = append(errs, fmt.Errorf("--cluster-cidr %q: one CIDR per IP family", *cidr))
			default:
				c.ClusterCIDRs = append(c.ClusterCIDRs, p.Masked())
			}
		}
	}
	return c, errors.Join(errs...)
}

// nodeName is the name endpoints' nodeName is compared with: the override when
// given, else the machine's hostname, trimmed and lower-cased as kube-proxy
// does (a Node's name is a lower-case DNS name, hostnames need not be).
func nodeName(override string, hostname func() (string, error)) (string, error) {
	name := override
	if name == "" {
		h, err := hostname()
		if err != nil {
			return "", fmt.Errorf("--hostname-override not given and the hostname is unknown: %w", err)
		}
		name = h
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return "", errors.New("--hostname-override: empty, and so is the hostname")
	}
	return name, nil
}

// clusterCIDR is the --cluster-cidr of family fam; invalid when it has none.
func (c *Config) clusterCIDR(fam service.Family) netip.Prefix {
	for _, p := range c.ClusterCIDRs {
		if fam.Has(p.Addr()) {
			return p
		}
	}
	return netip.Prefix{}
}

// modes is the mode's Config the flags say.
func (c *Config) modes(log *slog.Logger) modes.Config {
	return modes.Config{Mode: c.Mode, Offload: c.Offload,
		Host: dataplane.Host{Name: c.NodeName, IPs: c.NodeIPs, NodePortAddresses: c.NodePortAddresses,
			ClusterCIDRs: c.ClusterCIDRs, MasqueradeAll: c.MasqueradeAll},
		Promoter:      hybrid.PromoterConfig{PromoteConnRate: c.PromoteConnRate, PromoteAfter: c.PromoteAfter, DemoteAfter: c.DemoteAfter},
		IPVSScheduler: c.IPVSScheduler, IPVSStrictARP: c.IPVSStrictARP,
		SocketLB:       lifecycle.Config{Cgroup: c.SocketLBCgroup, PinPath: c.SocketLBPinPath, PinPathGiven: c.SocketLBPinPathSet, Logger: log},
		ProxyPortRange: c.ProxyPortRange, UDPIdleTimeout: c.UDPIdleTimeout, UDPMaxSessions: c.UDPMaxSessions,
		SyncPeriod: c.SyncPeriod, ShutdownGrace: c.ShutdownGrace, Logger: log}
}
