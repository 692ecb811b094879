package kubeproxyconfig

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/kube-proxy/config/v1alpha1"
)

// The modes of the mode field: kube-proxy's three Linux modes, and svcproxy's
// own, which kube-proxy's validation would refuse (validateProxyMode).
const (
	ModeIPTables  = "iptables"
	ModeIPVS      = "ipvs"
	ModeNFTables  = "nftables"
	ModeUserspace = "userspace"
	ModeSocketLB  = "socklb"
	ModeHybrid    = "hybrid"
)

// DefaultedModeWarning is what kube-proxy 1.37 logs (at error level) when its
// mode was not given and defaulted to iptables (createProxier,
// cmd/kube-proxy/app/server_linux.go), word for word.
const DefaultedModeWarning = "No kube-proxy mode specified: defaulting to 'iptables'. Note that in Kubernetes 1.40 the default mode will switch to 'nftables'. If you wish to continue using 'iptables' mode, you must explicitly specify 'mode: iptables' in the kube-proxy config file, or '--proxy-mode iptables' on the kube-proxy command line."

// Options are svcproxy's settings as a KubeProxyConfiguration gives them:
// what cmd/svcproxy's flags would otherwise say. Fields whose name says a
// flag take that flag's meaning (docs/operations.md).
type Options struct {
	// Mode is the mode field, "iptables" where it is empty (kube-proxy 1.37's
	// default); ModeDefaulted says it was empty, so that svcproxy logs
	// kube-proxy's warning about a defaulted mode.
	Mode          string
	ModeDefaulted bool

	// Kubeconfig is clientConnection.kubeconfig: "" is the in-cluster config.
	Kubeconfig string
	// QPS and Burst are clientConnection's client-side rate limit.
	QPS   float32
	Burst int

	// NodeName is hostnameOverride, trimmed and lower-cased; "" is the
	// hostname.
	NodeName string
	// NodeIP is bindAddress when it names an address (kube-proxy's
	// --bind-address: "its node's primary IP"), invalid for 0.0.0.0 and ::.
	NodeIP netip.Addr

	HealthzAddr string // --healthz-bind-address
	MetricsAddr string // --metrics-bind-address
	// BindAddressHardFail: a server that cannot listen stops svcproxy;
	// without it the failure is logged and the listen retried.
	BindAddressHardFail bool
	// EnableProfiling serves /debug/pprof/ on the metrics address.
	EnableProfiling bool

	// IPTables, IPVS and NFTables are the sections of the file; which one a
	// dataplane reads is Section's choice.
	IPTables, IPVS, NFTables Section
	IPVSScheduler            string // --ipvs-scheduler, "rr" where the file says ""
	IPVSStrictARP            bool   // --ipvs-strict-arp

	// ClusterCIDRs is clusterCIDR, at most one per IP family.
	ClusterCIDRs []netip.Prefix
	// NodePortAddresses is nodePortAddresses as listed, "" where the file has
	// none (svcproxy's default then: all, as kube-proxy's iptables and ipvs
	// modes; nftables mode's default, primary, is filled in by
	// PlatformDefaults).
	NodePortAddresses []string
	// ProxyPortRange is portRange: the userspace listeners' ports.
	ProxyPortRange string
	// OOMScoreAdj is oomScoreAdj, for /proc/self/oom_score_adj.
	OOMScoreAdj int

	// LogFormat is logging.format, "text" or "json"; Verbosity is
	// logging.verbosity (klog's -v).
	LogFormat string
	Verbosity int

	// Ignored are the fields svcproxy does not act on although the file
	// asks for something with them, each with why: one log line each.
	Ignored []IgnoredField
}

// Section is what svcproxy reads of one of the iptables, ipvs and nftables
// sections. The ipvs section has no masquerade settings of its own: IPVS
// mode masquerades with iptables' (as in kube-proxy).
type Section struct {
	SyncPeriod    time.Duration
	MinSyncPeriod time.Duration
	MasqueradeAll bool
	MasqueradeBit int
}

// IgnoredField is a field svcproxy accepts and does not act on.
type IgnoredField struct {
	Field  string // its path in the file: conntrack.maxPerCore
	Value  string
	Reason string
}

// Section is the section of the file a kernel path of mode reads, as
// kube-proxy's conversion to its internal configuration picks the sync
// periods and masqueradeAll by mode
// (Convert_v1alpha1_KubeProxyConfiguration_To_config_KubeProxyConfiguration):
// nftables mode reads nftables, ipvs mode ipvs (and iptables' masquerade
// bit, as kube-proxy's IPVS proxier), any other mode iptables. svcproxy's
// socket LB runs nftables beside it and reads nftables; userspace reads
// iptables, the tables of its portals. hybrid reads the section of its
// kernel path (--offload).
func (o *Options) Section(mode string) Section {
	switch mode {
	case ModeNFTables, ModeSocketLB:
		return o.NFTables
	case ModeIPVS:
		s := o.IPVS
		s.MasqueradeAll, s.MasqueradeBit = o.IPTables.MasqueradeAll, o.IPTables.MasqueradeBit
		return s
	}
	return o.IPTables
}

// PlatformDefaults fills in what kube-proxy fills in after reading its file
// or flags (platformApplyDefaults, cmd/kube-proxy/app/server_linux.go): an
// empty mode is iptables, nftables mode without nodePortAddresses serves
// NodePorts on the primary addresses only, and detectLocalMode is
// ClusterCIDR. It reports whether the mode was defaulted.
func PlatformDefaults(cfg *v1alpha1.KubeProxyConfiguration) (modeDefaulted bool) {
	if cfg.Mode == "" {
		cfg.Mode = ModeIPTables
		modeDefaulted = true
	}
	if cfg.Mode == ModeNFTables && len(cfg.NodePortAddresses) == 0 {
		cfg.NodePortAddresses = []string{"primary"}
	}
	if cfg.DetectLocalMode == "" {
		cfg.DetectLocalMode = "ClusterCIDR"
	}
	return modeDefaulted
}

// Map turns cfg, decoded and defaulted (Decode), into svcproxy's Options,
// checking each value svcproxy uses as kube-proxy's validation does
// (pkg/proxy/apis/config/validation): an error names the field. cfg itself
// is not changed: it stays what /configz serves.
func Map(cfg *v1alpha1.KubeProxyConfiguration) (Options, error) {
	c := cfg.DeepCopy()
	m := mapper{cfg: c}
	m.o.ModeDefaulted = PlatformDefaults(c)
	m.general()
	m.sections()
	m.network()
	m.ignored()
	return m.o, errors.Join(m.errs...)
}

// mapper collects Options and the errors of one Map.
type mapper struct {
	cfg  *v1alpha1.KubeProxyConfiguration
	o    Options
	errs []error
}

func (m *mapper) fail(field, format string, args ...any) {
	m.errs = append(m.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (m *mapper) ignore(field, value, reason string) {
	m.o.Ignored = append(m.o.Ignored, IgnoredField{Field: field, Value: value, Reason: reason})
}

// general maps the mode, the client, the node's name and the servers.
func (m *mapper) general() {
	c, o := m.cfg, &m.o
	switch mode := string(c.Mode); mode {
	case ModeIPTables, ModeIPVS, ModeNFTables, ModeUserspace, ModeSocketLB, ModeHybrid:
		o.Mode = mode
	case "kernelspace":
		m.fail("mode", "%q is kube-proxy's Windows mode: want iptables, ipvs or nftables (or svcproxy's userspace, socklb, hybrid)", mode)
	default:
		m.fail("mode", "%q: want iptables, ipvs or nftables (or svcproxy's userspace, socklb, hybrid)", mode)
	}
	o.Kubeconfig = c.ClientConnection.Kubeconfig
	o.QPS, o.Burst = c.ClientConnection.QPS, int(c.ClientConnection.Burst)
	if o.QPS < 0 {
		m.fail("clientConnection.qps", "%v: must be at least 0", o.QPS)
	}
	if o.Burst < 0 {
		m.fail("clientConnection.burst", "%d: must be at least 0", o.Burst)
	}
	o.NodeName = strings.ToLower(strings.TrimSpace(c.HostnameOverride))
	switch a, err := netip.ParseAddr(c.BindAddress); {
	case err != nil:
		m.fail("bindAddress", "%q: not an IP address", c.BindAddress)
	case !a.IsUnspecified():
		o.NodeIP = a.Unmap()
	}
	o.HealthzAddr = m.hostPort("healthzBindAddress", c.HealthzBindAddress)
	o.MetricsAddr = m.hostPort("metricsBindAddress", c.MetricsBindAddress)
	o.BindAddressHardFail = c.BindAddressHardFail
	o.EnableProfiling = c.EnableProfiling
	if adj := c.OOMScoreAdj; adj != nil {
		o.OOMScoreAdj = int(*adj)
		if *adj < -1000 || *adj > 1000 {
			m.fail("oomScoreAdj", "%d: must be within [-1000, 1000]", *adj)
		}
	}
	switch f := c.Logging.Format; f {
	case "text", "json":
		o.LogFormat = f
	default:
		m.fail("logging.format", "%q: want text or json", f)
	}
	o.Verbosity = int(c.Logging.Verbosity)
}

// hostPort checks an IP:port address, as validateHostPort; "" (no server)
// passes.
func (m *mapper) hostPort(field, addr string) string {
	if addr == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		m.fail(field, "%q: want IP:port", addr)
		return addr
	}
	if _, err := netip.ParseAddr(host); err != nil {
		m.fail(field, "%q: %q is not an IP address", addr, host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		m.fail(field, "%q: port %q: want 0-65535", addr, port)
	}
	return addr
}

// sections maps iptables, ipvs and nftables, checking the section of the
// mode in use as kube-proxy checks it (iptables always).
func (m *mapper) sections() {
	c, o := m.cfg, &m.o
	o.IPTables = m.section("iptables", c.IPTables.SyncPeriod.Duration, c.IPTables.MinSyncPeriod.Duration,
		c.IPTables.MasqueradeAll, c.IPTables.MasqueradeBit, true)
	o.NFTables = m.section("nftables", c.NFTables.SyncPeriod.Duration, c.NFTables.MinSyncPeriod.Duration,
		c.NFTables.MasqueradeAll, c.NFTables.MasqueradeBit, o.Mode == ModeNFTables || o.Mode == ModeSocketLB)
	o.IPVS = m.section("ipvs", c.IPVS.SyncPeriod.Duration, c.IPVS.MinSyncPeriod.Duration,
		false, nil, o.Mode == ModeIPVS)
	o.IPVSStrictARP = c.IPVS.StrictARP
	o.IPVSScheduler = c.IPVS.Scheduler
	if o.IPVSScheduler == "" {
		o.IPVSScheduler = "rr" // kube-proxy's IPVS proxier: defaultScheduler
	}
	// kernel/ipvs's Schedulers: the kernel's, less those svcproxy does not
	// load (lblc, lblcr, mh, fo, ovf, twos).
	if !slices.Contains([]string{"rr", "wrr", "lc", "wlc", "sh", "dh", "sed", "nq"}, o.IPVSScheduler) {
		m.fail("ipvs.scheduler", "%q: svcproxy supports rr, wrr, lc, wlc, sh, dh, sed, nq", c.IPVS.Scheduler)
	}
}

func (m *mapper) section(name string, sync, minSync time.Duration, masqAll bool, bit *int32, check bool) Section {
	s := Section{SyncPeriod: sync, MinSyncPeriod: minSync, MasqueradeAll: masqAll, MasqueradeBit: 14}
	if bit != nil {
		s.MasqueradeBit = int(*bit)
		switch {
		case *bit < 0 || *bit > 31:
			m.fail(name+".masqueradeBit", "%d: must be within [0, 31]", *bit)
		case *bit == 0:
			// offload's Configs read MasqueradeBit 0 as "the default, 14".
			m.fail(name+".masqueradeBit", "0: svcproxy's rules cannot mark with bit 0; choose 1 to 31 (kube-proxy's default is 14)")
		}
	}
	if !check {
		return s
	}
	if sync <= 0 {
		m.fail(name+".syncPeriod", "%v: must be greater than 0", sync)
	}
	if minSync < 0 {
		m.fail(name+".minSyncPeriod", "%v: must be 0 or more", minSync)
	}
	if minSync > sync {
		m.fail(name+".syncPeriod", "%v: must be at least %s.minSyncPeriod (%v)", sync, name, minSync)
	}
	return s
}

// network maps the pod range, the NodePort addresses and the port range.
func (m *mapper) network() {
	c, o := m.cfg, &m.o
	if c.ClusterCIDR != "" {
		seen := map[bool]bool{}
		for _, s := range strings.Split(c.ClusterCIDR, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				m.fail("clusterCIDR", "%q: %q is not a CIDR", c.ClusterCIDR, s)
				continue
			}
			if seen[p.Addr().Is4()] {
				m.fail("clusterCIDR", "%q: at most one CIDR per IP family", c.ClusterCIDR)
				continue
			}
			seen[p.Addr().Is4()] = true
			o.ClusterCIDRs = append(o.ClusterCIDRs, p.Masked())
		}
	}
	for i, a := range c.NodePortAddresses {
		switch a {
		case "primary", "localhost", "all":
		default:
			if _, err := netip.ParsePrefix(a); err != nil {
				m.fail(fmt.Sprintf("nodePortAddresses[%d]", i), "%q: want a CIDR or primary, localhost, all", a)
			}
		}
	}
	o.NodePortAddresses = slices.Clone(c.NodePortAddresses)
	o.ProxyPortRange = c.PortRange
}
