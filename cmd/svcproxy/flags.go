package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/hybrid"
	"github.com/svcproxy/svcproxy/kernel/socklb/lifecycle"
	"github.com/svcproxy/svcproxy/kubeproxyconfig"
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

// Config is everything the flags (and kube-proxy's configuration file) say;
// run takes it and nothing else.
type Config struct {
	ServicesFile     string
	ServicesMaxBytes int64
	Kubeconfig       string
	// Master, QPS and Burst are kube-proxy's --master and the file's
	// clientConnection rate limit (service/watch's Config).
	Master string
	QPS    float32
	Burst  int
	Mode   string
	// Offload is hybrid's kernel path (--offload).
	Offload string
	// ModeDefaulted: no mode was given, and Mode is its default (logged at
	// start, as kube-proxy logs a defaulted mode: logModeChoice): svcproxy's
	// own, hybrid, from the flags; kube-proxy's, iptables, from a --config
	// file whose mode is empty.
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
	// BindAddressHardFail: a server that cannot listen stops svcproxy;
	// otherwise it is logged and retried (kube-proxy's bindAddressHardFail).
	BindAddressHardFail bool
	// EnableProfiling serves Go's /debug/pprof/ on the metrics address.
	EnableProfiling bool

	NodeName       string
	NodeIPs        []netip.Addr
	ClusterCIDRs   []netip.Prefix // at most one per IP family
	MasqueradeAll  bool
	MasqueradeBit  int // 0: 14, kube-proxy's default
	ProxyPortRange string
	UDPIdleTimeout time.Duration
	UDPMaxSessions int
	MinSyncPeriod  time.Duration
	SyncPeriod     time.Duration
	FullSyncPeriod time.Duration
	ShutdownGrace  time.Duration

	// NodePortAddresses is --nodeport-addresses: which node addresses
	// answer NodePorts (dataplane.NodePortAddresses).
	NodePortAddresses dataplane.NodePortAddresses

	// OOMScoreAdj, when not nil, is written to /proc/self/oom_score_adj at
	// start (kube-proxy's oomScoreAdj).
	OOMScoreAdj *int
	// LogFormat is "text" or "json"; Verbosity is klog's -v: 4 and more
	// turn on debug lines.
	LogFormat string
	Verbosity int

	// ConfigFile is --config, kube-proxy's KubeProxyConfiguration.
	// KubeProxy is the configuration in force, from that file or from the
	// flags, as /configz serves it.
	ConfigFile string
	KubeProxy  *v1alpha1.KubeProxyConfiguration
	// Ignored are the file's fields svcproxy does not act on, and
	// IgnoredFlags the flags given beside --config that the file overrides:
	// run logs them.
	Ignored      []kubeproxyconfig.IgnoredField
	IgnoredFlags []string

	Cleanup       bool
	WriteConfigTo string // --write-config-to: write KubeProxy there and exit
	InitOnly      bool   // --init-only: nothing to do before dropping privileges
	Version       bool   // --version
}

// The defaults svcproxy keeps where kube-proxy's differ, when no --config
// file is given: its mode, and the lab's pod range.
const (
	defaultMode         = modeHybrid
	defaultClusterCIDRs = "198.19.0.0/16,2001:db8:19::/64"
)

// svcproxyConfigFlags are svcproxy's own flags that say what a field of
// kube-proxy's file says: beside --config the file wins over them, as over
// kube-proxy's own flags.
var svcproxyConfigFlags = map[string]string{
	"mode":             "mode",
	"sync-period":      "iptables.syncPeriod, ipvs.syncPeriod, nftables.syncPeriod",
	"min-sync-period":  "iptables.minSyncPeriod, ipvs.minSyncPeriod, nftables.minSyncPeriod",
	"proxy-port-range": "portRange",
}

// parseFlags reads args into a Config, checking what can be checked before
// anything runs. kube-proxy's flags (kubeproxyconfig.AddFlags) and
// svcproxy's own share one flag set; with --config, kube-proxy's file is
// the configuration and the flags follow kube-proxy's rule
// (kubeproxyconfig.Flags), svcproxy's own options applying beside it.
func parseFlags(args []string) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("svcproxy", flag.ContinueOnError)
	kp := kubeproxyconfig.AddFlags(fs)
	fs.StringVar(&c.ServicesFile, "services", "", "Kubernetes manifests `FILE` (Services, EndpointSlices, Endpoints, and this node's Node), reloaded when it changes")
	fs.Int64Var(&c.ServicesMaxBytes, "services-max-bytes", watch.DefaultMaxFileBytes, "refuse a --services file larger than this many `BYTES`, keeping the last good state")
	mode := fs.String("mode", defaultMode, "proxy mode: userspace, iptables, nftables, ipvs, socklb or hybrid (kube-proxy's --proxy-mode, and the file's mode, say the same)")
	fs.StringVar(&c.Offload, "offload", modeNFTables, "hybrid's kernel path: nftables, ipvs, iptables or socklb (nftables and ipvs fall back to iptables where the kernel or the nft tool lacks them; socklb is the socket LB with nftables beside)")
	fs.Float64Var(&c.PromoteConnRate, "promote-conn-rate", 50, "hybrid: new connections per second that make a service port hot")
	fs.DurationVar(&c.PromoteAfter, "promote-after", 5*time.Second, "hybrid: how long the rate must hold before promotion")
	fs.DurationVar(&c.DemoteAfter, "demote-after", 5*time.Minute, "hybrid: how long a promoted port must stay quiet before it returns to userspace (0: never)")
	fs.StringVar(&c.SocketLBCgroup, "socklb-cgroup", "", "socklb: the cgroup v2 `DIR` whose processes' connect() to a ClusterIP is balanced by the socket LB (default "+lifecycle.DefaultCgroup+", which must then be a cgroup2 mount)")
	fs.StringVar(&c.SocketLBPinPath, "socklb-pin-path", lifecycle.DefaultPinPath, "socklb: a `DIR` on a bpffs (made if missing) where the socket LB's maps and program links are pinned, so a restart adopts them and translation never stops; \"\" pins nothing")
	nodeIPs := fs.String("node-ip", "", "this node's addresses, comma-separated: what primary in --nodeport-addresses stands for (kube-proxy reads them from the Node object)")
	portRange := fs.String("proxy-port-range", "", "userspace: local ports for the listeners, `FROM-TO` (default: chosen by the kernel)")
	fs.DurationVar(&c.UDPIdleTimeout, "udp-idle-timeout", 250*time.Millisecond, "userspace: how long an idle UDP session lives (kube-proxy's default)")
	fs.IntVar(&c.UDPMaxSessions, "udp-max-sessions", userspace.DefaultUDPMaxSessions, "userspace: UDP sessions (client addresses) per listener; a new client beyond them ends the session idle longest")
	minSync := fs.Duration("min-sync-period", time.Second, "the least time from the end of one sync to the start of the next")
	sync := fs.Duration("sync-period", 30*time.Second, "at least one sync per this interval (iptables, nftables: partial, after checking that the rules are still in place)")
	fs.DurationVar(&c.FullSyncPeriod, "full-sync-period", time.Hour, "iptables, nftables: a full sync this long after the end of the last one (kube-proxy's fixed proxyutil.FullSyncPeriod; benchmarks shorten it)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "userspace: on SIGTERM, how long open connections may finish before they are closed")
	if err := fs.Parse(kubeproxyconfig.NormalizeArgs(fs, args)); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	c.SocketLBPinPathSet = given["socklb-pin-path"]
	c.ConfigFile = kp.ConfigFile

	// Without a file, svcproxy's flags say what kube-proxy's would, and
	// svcproxy's defaults stand where nothing is given.
	if c.ConfigFile == "" {
		switch {
		case given["mode"] && given["proxy-mode"] && *mode != fs.Lookup("proxy-mode").Value.String():
			return nil, fmt.Errorf("--mode %q and --proxy-mode %q: give one", *mode, fs.Lookup("proxy-mode").Value)
		case given["mode"] || !given["proxy-mode"]:
			c.ModeDefaulted = !given["mode"]
			_ = fs.Set("proxy-mode", *mode)
		}
		if given["sync-period"] {
			_ = fs.Set("iptables-sync-period", sync.String())
			_ = fs.Set("ipvs-sync-period", sync.String())
		}
		if given["min-sync-period"] || !given["iptables-min-sync-period"] && !given["ipvs-min-sync-period"] {
			// svcproxy's minimum is 1s in every mode; kube-proxy's IPVS
			// mode would otherwise take its own.
			_ = fs.Set("iptables-min-sync-period", minSync.String())
			_ = fs.Set("ipvs-min-sync-period", minSync.String())
		}
	}
	kcfg, ignoredFlags, err := kp.Complete()
	if err != nil {
		return nil, err
	}
	if c.ConfigFile == "" {
		kcfg.PortRange = *portRange
		if !given["cluster-cidr"] {
			kcfg.ClusterCIDR = defaultClusterCIDRs
		}

	} else {
		for name := range svcproxyConfigFlags {
			if given[name] {
				ignoredFlags = append(ignoredFlags, "--"+name)
			}
		}
		slices.Sort(ignoredFlags)
	}
	opts, err := kubeproxyconfig.Map(kcfg)
	if err != nil {
		if c.ConfigFile != "" {
			return nil, fmt.Errorf("%s: %w", c.ConfigFile, err)
		}
		return nil, fmt.Errorf("flags: %w", err)
	}
	if c.ConfigFile == "" && !given["nodeport-addresses"] {
		// svcproxy's default in every mode: primary with --node-ip, else
		// all (kube-proxy's nftables mode: primary, from its Node object).
		opts.NodePortAddresses, kcfg.NodePortAddresses = nil, nil
	}
	c.KubeProxy, c.Ignored, c.IgnoredFlags = kcfg, opts.Ignored, ignoredFlags
	return c, c.fromOptions(opts, kp, given, *nodeIPs)
}

// fromOptions fills c from what kube-proxy's file or flags say (opts), with
// svcproxy's own flags beside them.
func (c *Config) fromOptions(opts kubeproxyconfig.Options, kp *kubeproxyconfig.Flags, given map[string]bool, nodeIPs string) error {
	var errs []error
	c.Mode = opts.Mode
	if c.ConfigFile != "" {
		c.ModeDefaulted = kp.ModeDefaulted
	}
	switch c.Offload {
	case modeNFTables, modeIPVS, modeIPTables, modeSocketLB:
	default:
		errs = append(errs, fmt.Errorf("--offload %q: must be nftables, ipvs, iptables or socklb", c.Offload))
	}
	// The section of the file the kernel path reads: the mode's, or hybrid's
	// kernel path's.
	kernel := c.Mode
	if kernel == modeHybrid {
		kernel = c.Offload
	}
	sec := opts.Section(kernel)
	c.SyncPeriod, c.MinSyncPeriod = sec.SyncPeriod, sec.MinSyncPeriod
	c.MasqueradeAll, c.MasqueradeBit = sec.MasqueradeAll, sec.MasqueradeBit
	c.Kubeconfig, c.Master, c.QPS, c.Burst = opts.Kubeconfig, kp.Master, opts.QPS, opts.Burst
	if c.ServicesFile != "" && (c.Kubeconfig != "" || c.Master != "") {
		errs = append(errs, errors.New("--services and --kubeconfig (or --master): choose one source"))
	}
	if c.ServicesMaxBytes < 1 {
		errs = append(errs, fmt.Errorf("--services-max-bytes %d: must be at least 1", c.ServicesMaxBytes))
	}
	name, err := nodeName(opts.NodeName, os.Hostname)
	if err != nil {
		errs = append(errs, err)
	}
	c.NodeName = name
	c.HealthzAddr, c.MetricsAddr = opts.HealthzAddr, opts.MetricsAddr
	c.BindAddressHardFail, c.EnableProfiling = opts.BindAddressHardFail, opts.EnableProfiling
	if c.ConfigFile == "" && !given["bind-address-hard-fail"] {
		c.BindAddressHardFail = true // svcproxy's own default: a taken port stops it
	}
	c.IPVSScheduler, c.IPVSStrictARP = opts.IPVSScheduler, opts.IPVSStrictARP
	c.ClusterCIDRs = opts.ClusterCIDRs
	c.ProxyPortRange = opts.ProxyPortRange
	c.LogFormat, c.Verbosity = opts.LogFormat, opts.Verbosity
	if c.ConfigFile != "" || given["oom-score-adj"] {
		adj := opts.OOMScoreAdj
		c.OOMScoreAdj = &adj
	}
	c.Cleanup, c.WriteConfigTo, c.InitOnly, c.Version = kp.Cleanup, kp.WriteConfigTo, kp.InitOnly, kp.Version

	// --node-ip stands for the Node object's addresses, which kube-proxy
	// reads and svcproxy does not; without it, the file's bindAddress.
	if nodeIPs != "" {
		for _, s := range strings.Split(nodeIPs, ",") {
			ip, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				errs = append(errs, fmt.Errorf("--node-ip %q: not an IP address", s))
				continue
			}
			c.NodeIPs = append(c.NodeIPs, ip)
		}
	} else if opts.NodeIP.IsValid() {
		c.NodeIPs = []netip.Addr{opts.NodeIP}
	}
	nodePorts := strings.Join(opts.NodePortAddresses, ",")
	if c.ConfigFile != "" && len(c.NodeIPs) == 0 && slices.Contains(opts.NodePortAddresses, "primary") {
		// kube-proxy takes the primary addresses from its Node object: here
		// the first address of each family on this node's interfaces.
		for _, fam := range service.Families {
			if a := (dataplane.Host{}).PrimaryIP(fam); a.IsValid() {
				c.NodeIPs = append(c.NodeIPs, a)
			}
		}
	}
	if c.ConfigFile != "" && len(c.NodeIPs) == 0 && slices.Contains(opts.NodePortAddresses, "primary") {
		errs = append(errs, fmt.Errorf("%s: nodePortAddresses %q: primary, but this node has no address to be it: give bindAddress, or --node-ip", c.ConfigFile, opts.NodePortAddresses))
	} else if c.NodePortAddresses, err = dataplane.ParseNodePortAddresses(nodePorts, c.NodeIPs); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
			ClusterCIDRs: c.ClusterCIDRs, MasqueradeAll: c.MasqueradeAll, MasqueradeBit: c.MasqueradeBit},
		Promoter:      hybrid.PromoterConfig{PromoteConnRate: c.PromoteConnRate, PromoteAfter: c.PromoteAfter, DemoteAfter: c.DemoteAfter},
		IPVSScheduler: c.IPVSScheduler, IPVSStrictARP: c.IPVSStrictARP,
		SocketLB:       lifecycle.Config{Cgroup: c.SocketLBCgroup, PinPath: c.SocketLBPinPath, PinPathGiven: c.SocketLBPinPathSet, Logger: log},
		ProxyPortRange: c.ProxyPortRange, UDPIdleTimeout: c.UDPIdleTimeout, UDPMaxSessions: c.UDPMaxSessions,
		SyncPeriod: c.SyncPeriod, FullSyncPeriod: c.FullSyncPeriod, ShutdownGrace: c.ShutdownGrace, Logger: log}
}
