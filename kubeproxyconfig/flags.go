package kubeproxyconfig

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
)

// Flags is kube-proxy 1.37's command line (cmd/kube-proxy/app/options.go,
// Options.AddFlags, and the logging flags of component-base's logsapi),
// bound, as kube-proxy binds it, to a configuration that starts at the
// defaults. Complete then gives the configuration in force, by kube-proxy's
// rule (Options.Complete):
//
//   - without --config, the defaults and every flag given;
//   - with --config FILE, the file alone: every flag that sets a field of
//     the configuration is ignored (kube-proxy's help says so of some of
//     them; it is true of all), except --hostname-override and the logging
//     flags (--v, --vmodule, --logging-format, ...), which win over the file.
//
// Flags that are no field of the file (--config, --write-config-to,
// --cleanup, --init-only, --master) keep their meaning either way.
type Flags struct {
	// ModeDefaulted, after Complete: the mode was given neither by the file
	// nor by --proxy-mode, and is kube-proxy's default, iptables.
	ModeDefaulted bool

	ConfigFile    string // --config
	WriteConfigTo string // --write-config-to
	Cleanup       bool   // --cleanup
	InitOnly      bool   // --init-only
	Master        string // --master: the API server's URL, over the kubeconfig's
	Version       bool   // --version: print the version and exit

	cfg              v1alpha1.KubeProxyConfiguration
	hostnameOverride string
	healthzPort      int
	metricsPort      int
	syncPeriods      map[string]*time.Duration // iptables-sync-period, ...
	clusterCIDRs     string
	masqueradeAll    bool
	mode             string

	fs    *flag.FlagSet
	names map[string]bool // the flags AddFlags registered
}

// loggingFlags are the flags Complete copies over a --config file's
// logging section (copyLogsFromFlags).
var loggingFlags = []string{"logging-format", "log-flush-frequency", "v", "vmodule",
	"log-text-split-stream", "log-text-info-buffer-size", "log-json-split-stream", "log-json-info-buffer-size"}

// otherFlags are kube-proxy's flags that set no field of the file.
var otherFlags = []string{"config", "write-config-to", "cleanup", "init-only", "master", "hostname-override", "version"}

// AddFlags registers kube-proxy's flags on fs, with kube-proxy's defaults.
func AddFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs, healthzPort: healthzPort, metricsPort: metricsPort, names: map[string]bool{}}
	before := map[string]bool{}
	fs.VisitAll(func(fl *flag.Flag) { before[fl.Name] = true })
	Default(&f.cfg)
	c := &f.cfg
	fs.StringVar(&f.ConfigFile, "config", "", "The path to the configuration `FILE`, a KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1).")
	fs.StringVar(&f.WriteConfigTo, "write-config-to", "", "If set, write the configuration in force to this `FILE` and exit.")
	fs.BoolVar(&f.Cleanup, "cleanup", false, "If true cleanup iptables and ipvs rules and exit.")
	fs.BoolVar(&f.Version, "version", false, "Print version information and quit.")
	fs.BoolVar(&f.InitOnly, "init-only", false, "If true, perform any initialization steps that must be done with full root privileges, and then exit.")
	fs.Var(gateValue{&c.FeatureGates}, "feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features. This parameter is ignored if a config file is specified by --config.")
	fs.StringVar(&c.ClientConnection.Kubeconfig, "kubeconfig", "", "Path to kubeconfig `FILE` with authorization information (the master location can be overridden by the master flag).")
	fs.StringVar(&f.Master, "master", "", "The address of the Kubernetes API server (overrides any value in kubeconfig)")
	fs.StringVar(&c.ClientConnection.ContentType, "kube-api-content-type", c.ClientConnection.ContentType, "Content type of requests sent to apiserver.")
	fs.Var(int32Value{&c.ClientConnection.Burst}, "kube-api-burst", "Burst to use while talking with kubernetes apiserver")
	fs.Var(float32Value{&c.ClientConnection.QPS}, "kube-api-qps", "QPS to use while talking with kubernetes apiserver")
	fs.StringVar(&f.hostnameOverride, "hostname-override", "", "If non-empty, will be used as the name of the Node that kube-proxy is running on. If unset, the node name is assumed to be the same as the node's hostname.")
	fs.StringVar(&c.BindAddress, "bind-address", c.BindAddress, "Overrides kube-proxy's idea of what its node's primary IP is. This parameter is ignored if a config file is specified by --config.")
	fs.StringVar(&c.HealthzBindAddress, "healthz-bind-address", c.HealthzBindAddress, "The IP address and port for the health check server to serve on. This parameter is ignored if a config file is specified by --config.")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "The IP address and port for the metrics server to serve on. This parameter is ignored if a config file is specified by --config.")
	fs.BoolVar(&c.BindAddressHardFail, "bind-address-hard-fail", false, "If true kube-proxy will treat failure to bind to a port as fatal and exit")
	fs.BoolVar(&c.EnableProfiling, "profiling", false, "If true enables profiling via web interface on /debug/pprof handler. This parameter is ignored if a config file is specified by --config.")
	fs.StringVar(&c.ShowHiddenMetricsForVersion, "show-hidden-metrics-for-version", "", "The previous version for which you want to show hidden metrics. This parameter is ignored if a config file is specified by --config.")
	fs.StringVar(&f.mode, "proxy-mode", "", "Which proxy mode to use: 'iptables' (default), 'ipvs' or 'nftables' (and svcproxy's 'userspace', 'socklb', 'hybrid'). This parameter is ignored if a config file is specified by --config.")
	fs.Var(int32Value{c.IPTables.MasqueradeBit}, "iptables-masquerade-bit", "If using the iptables or ipvs proxy mode, the bit of the fwmark space to mark packets requiring SNAT with. Must be within the range [0, 31].")
	fs.BoolVar(&f.masqueradeAll, "masquerade-all", false, "SNAT all traffic sent via Service cluster IPs. This may be required with some CNI plugins.")
	fs.BoolVar(c.IPTables.LocalhostNodePorts, "iptables-localhost-nodeports", true, "If false, kube-proxy will disable the legacy behavior of allowing NodePort services to be accessed via localhost.")
	f.syncPeriods = map[string]*time.Duration{}
	for _, s := range []struct {
		name string
		def  time.Duration
		help string
	}{
		{"iptables-sync-period", 30 * time.Second, "An interval (e.g. '5s', '1m', '2h22m') indicating how frequently various re-synchronizing and cleanup operations are performed. Must be greater than 0."},
		{"iptables-min-sync-period", time.Second, "The minimum period between iptables rule resyncs (e.g. '5s', '1m', '2h22m'). A value of 0 means every Service or EndpointSlice change will result in an immediate iptables resync."},
		{"ipvs-sync-period", 30 * time.Second, "An interval (e.g. '5s', '1m', '2h22m') indicating how frequently various re-synchronizing and cleanup operations are performed. Must be greater than 0."},
		{"ipvs-min-sync-period", time.Second, "The minimum period between IPVS rule resyncs (e.g. '5s', '1m', '2h22m'). A value of 0 means every Service or EndpointSlice change will result in an immediate IPVS resync."},
	} {
		f.syncPeriods[s.name] = fs.Duration(s.name, s.def, s.help)
	}
	fs.StringVar(&c.IPVS.Scheduler, "ipvs-scheduler", "", "The ipvs scheduler type when proxy mode is ipvs")
	fs.Var(sliceValue{&c.IPVS.ExcludeCIDRs}, "ipvs-exclude-cidrs", "A comma-separated list of CIDRs which the ipvs proxier should not touch when cleaning up IPVS rules.")
	fs.BoolVar(&c.IPVS.StrictARP, "ipvs-strict-arp", false, "Enable strict ARP by setting arp_ignore to 1 and arp_announce to 2")
	fs.DurationVar(&c.IPVS.TCPTimeout.Duration, "ipvs-tcp-timeout", 0, "The timeout for idle IPVS TCP connections, 0 to leave as-is. (e.g. '5s', '1m', '2h22m').")
	fs.DurationVar(&c.IPVS.TCPFinTimeout.Duration, "ipvs-tcpfin-timeout", 0, "The timeout for IPVS TCP connections after receiving a FIN packet, 0 to leave as-is. (e.g. '5s', '1m', '2h22m').")
	fs.DurationVar(&c.IPVS.UDPTimeout.Duration, "ipvs-udp-timeout", 0, "The timeout for IPVS UDP packets, 0 to leave as-is. (e.g. '5s', '1m', '2h22m').")
	fs.Var(stringValue{(*string)(&c.DetectLocalMode)}, "detect-local-mode", "Mode to use to detect local traffic. This parameter is ignored if a config file is specified by --config.")
	fs.StringVar(&c.DetectLocal.BridgeInterface, "pod-bridge-interface", "", "A bridge interface name. When --detect-local-mode is set to BridgeInterface, kube-proxy will consider traffic to be local if it originates from this bridge.")
	fs.StringVar(&c.DetectLocal.InterfaceNamePrefix, "pod-interface-name-prefix", "", "An interface name prefix. When --detect-local-mode is set to InterfaceNamePrefix, kube-proxy will consider traffic to be local if it originates from any interface whose name begins with this prefix.")
	fs.StringVar(&f.clusterCIDRs, "cluster-cidr", "", "The CIDR range of the pods in the cluster. (For dual-stack clusters, this can be a comma-separated dual-stack pair of CIDR ranges.) This parameter is ignored if a config file is specified by --config.")
	fs.Var(sliceValue{&c.NodePortAddresses}, "nodeport-addresses", "A list of CIDR ranges and/or keywords (primary, localhost, all) that expand to CIDR ranges. NodePort services are only accessible on node IPs covered by the list. This parameter is ignored if a config file is specified by --config.")
	fs.Var(int32Value{c.OOMScoreAdj}, "oom-score-adj", "The oom-score-adj value for kube-proxy process. Values must be within the range [-1000, 1000]. This parameter is ignored if a config file is specified by --config.")
	fs.Var(int32Value{c.Conntrack.MaxPerCore}, "conntrack-max-per-core", "Maximum number of NAT connections to track per CPU core (0 to leave the limit as-is and ignore conntrack-min).")
	fs.Var(int32Value{c.Conntrack.Min}, "conntrack-min", "Minimum number of conntrack entries to allocate, regardless of conntrack-max-per-core (set conntrack-max-per-core=0 to leave the limit as-is).")
	fs.DurationVar(&c.Conntrack.TCPEstablishedTimeout.Duration, "conntrack-tcp-timeout-established", c.Conntrack.TCPEstablishedTimeout.Duration, "Idle timeout for established TCP connections (0 to leave as-is)")
	fs.DurationVar(&c.Conntrack.TCPCloseWaitTimeout.Duration, "conntrack-tcp-timeout-close-wait", c.Conntrack.TCPCloseWaitTimeout.Duration, "NAT timeout for TCP connections in the CLOSE_WAIT state")
	fs.BoolVar(&c.Conntrack.TCPBeLiberal, "conntrack-tcp-be-liberal", false, "Enable liberal mode for tracking TCP packets by setting nf_conntrack_tcp_be_liberal to 1")
	fs.DurationVar(&c.Conntrack.UDPTimeout.Duration, "conntrack-udp-timeout", 0, "Idle timeout for UNREPLIED UDP connections (0 to leave as-is)")
	fs.DurationVar(&c.Conntrack.UDPStreamTimeout.Duration, "conntrack-udp-timeout-stream", 0, "Idle timeout for ASSURED UDP connections (0 to leave as-is)")
	fs.DurationVar(&c.ConfigSyncPeriod.Duration, "config-sync-period", c.ConfigSyncPeriod.Duration, "How often configuration from the apiserver is refreshed. Must be greater than 0.")
	fs.IntVar(&f.healthzPort, "healthz-port", healthzPort, "DEPRECATED: use --healthz-bind-address. The port to bind the health check server. Use 0 to disable.")
	fs.IntVar(&f.metricsPort, "metrics-port", metricsPort, "DEPRECATED: use --metrics-bind-address. The port to bind the metrics server. Use 0 to disable.")
	addLoggingFlags(fs, &c.Logging)
	fs.VisitAll(func(fl *flag.Flag) { f.names[fl.Name] = !before[fl.Name] })
	return f
}

// addLoggingFlags registers logsapi's flags (AddFlags: text and json
// formats, both known to svcproxy).
func addLoggingFlags(fs *flag.FlagSet, l *logsapi.LoggingConfiguration) {
	fs.StringVar(&l.Format, "logging-format", l.Format, `Sets the log format. Permitted formats: "json", "text".`)
	fs.DurationVar(&l.FlushFrequency.Duration.Duration, "log-flush-frequency", l.FlushFrequency.Duration.Duration, "Maximum number of seconds between log flushes")
	fs.Var(uint32Value{(*uint32)(&l.Verbosity)}, "v", "number for the log level verbosity")
	fs.Var(vmoduleValue{&l.VModule}, "vmodule", "comma-separated list of pattern=N settings for file-filtered logging (only works for text log format)")
	fs.BoolVar(&l.Options.Text.SplitStream, "log-text-split-stream", false, "[Alpha] In text format, write error messages to stderr and info messages to stdout.")
	fs.Var(quantityValue{&l.Options.Text.InfoBufferSize}, "log-text-info-buffer-size", "[Alpha] In text format with split output streams, the info messages can be buffered for a while to increase performance.")
	fs.BoolVar(&l.Options.JSON.SplitStream, "log-json-split-stream", false, "[Alpha] In JSON format, write error messages to stderr and info messages to stdout.")
	fs.Var(quantityValue{&l.Options.JSON.InfoBufferSize}, "log-json-info-buffer-size", "[Alpha] In JSON format with split output streams, the info messages can be buffered for a while to increase performance.")
}

// Complete returns the configuration in force, as kube-proxy's
// Options.Complete makes it, after fs.Parse: from --config (decoded and
// defaulted by Load) with the logging flags given copied over it, or from
// the flags; then the platform's defaults (PlatformDefaults) and
// --hostname-override. ignoredFlags are the flags given that the file made
// meaningless, for one warning (kube-proxy says nothing of them).
func (f *Flags) Complete() (cfg *v1alpha1.KubeProxyConfiguration, ignoredFlags []string, err error) {
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if f.ConfigFile == "" {
		cfg = f.fromFlags(given)
	} else {
		if cfg, err = Load(f.ConfigFile); err != nil {
			return nil, nil, err
		}
		copyLogging(&cfg.Logging, &f.cfg.Logging, given)
		for _, name := range slices.Sorted(maps.Keys(given)) {
			if f.names[name] && !slices.Contains(loggingFlags, name) && !slices.Contains(otherFlags, name) {
				ignoredFlags = append(ignoredFlags, "--"+name)
			}
		}
	}
	f.ModeDefaulted = PlatformDefaults(cfg)
	// processHostnameOverrideFlag: the flag wins over the file.
	if f.hostnameOverride != "" {
		name := strings.TrimSpace(f.hostnameOverride)
		if name == "" {
			return nil, nil, errors.New("--hostname-override: empty hostname-override is invalid")
		}
		cfg.HostnameOverride = strings.ToLower(name)
	}
	return cfg, ignoredFlags, nil
}

// fromFlags is the configuration of the flags alone: the defaults, the
// flags bound to fields, and the flags kube-proxy maps by hand
// (processV1Alpha1Flags, addressFromDeprecatedFlags).
func (f *Flags) fromFlags(given map[string]bool) *v1alpha1.KubeProxyConfiguration {
	cfg := f.cfg.DeepCopy()
	cfg.Mode = v1alpha1.ProxyMode(f.mode)
	// The sync periods and masqueradeAll are one setting each in kube-proxy's
	// internal configuration, written back to the mode's section. Before the
	// flags, that section has the defaults the internal configuration took
	// from the iptables section (the mode was not known yet when it was
	// made): ipvs.minSyncPeriod is 1s here, not 0. svcproxy's own modes
	// (hybrid, userspace, socklb) read whichever section their kernel path
	// reads (Options.Section), so the flags go to all three.
	type section struct {
		sync, minSync *metav1.Duration
		masq          *bool
	}
	ipt := section{&cfg.IPTables.SyncPeriod, &cfg.IPTables.MinSyncPeriod, &cfg.IPTables.MasqueradeAll}
	ipvs := section{&cfg.IPVS.SyncPeriod, &cfg.IPVS.MinSyncPeriod, ipt.masq} // ipvs masquerades with iptables' setting
	nft := section{&cfg.NFTables.SyncPeriod, &cfg.NFTables.MinSyncPeriod, &cfg.NFTables.MasqueradeAll}
	var sections []section
	switch cfg.Mode {
	case ModeNFTables:
		sections = []section{nft}
	case ModeIPVS:
		sections = []section{ipvs}
	case "", ModeIPTables:
		sections = []section{ipt}
	default:
		sections = []section{ipt, ipvs, nft}
	}
	syncFlag, minFlag := "iptables-sync-period", "iptables-min-sync-period"
	if cfg.Mode == ModeIPVS {
		syncFlag, minFlag = "ipvs-sync-period", "ipvs-min-sync-period"
	}
	base := cfg.IPTables
	for _, s := range sections {
		*s.sync, *s.minSync = base.SyncPeriod, base.MinSyncPeriod
		if given[syncFlag] {
			s.sync.Duration = *f.syncPeriods[syncFlag]
		}
		if given[minFlag] {
			s.minSync.Duration = *f.syncPeriods[minFlag]
		}
		*s.masq = f.masqueradeAll
	}
	if given["cluster-cidr"] {
		cfg.ClusterCIDR = f.clusterCIDRs
	}
	if f.WriteConfigTo == "" {
		cfg.HealthzBindAddress = addressFromPort(cfg.HealthzBindAddress, f.healthzPort)
		cfg.MetricsBindAddress = addressFromPort(cfg.MetricsBindAddress, f.metricsPort)
	}
	return cfg
}

// addressFromPort is addressFromDeprecatedFlags: port 0 turns the server
// off, another port replaces the address's when it has none.
func addressFromPort(addr string, port int) string {
	if port == 0 {
		return ""
	}
	return appendPortIfNeeded(addr, port)
}

// copyLogging copies the logging flags given onto to, as copyLogsFromFlags:
// vmodule's items from the flags come after the file's.
func copyLogging(to, from *logsapi.LoggingConfiguration, given map[string]bool) {
	if given["logging-format"] {
		to.Format = from.Format
	}
	if given["log-flush-frequency"] {
		to.FlushFrequency = from.FlushFrequency
	}
	if given["v"] {
		to.Verbosity = from.Verbosity
	}
	if given["vmodule"] {
		to.VModule = append(slices.Clone(from.VModule), to.VModule...)
	}
	if given["log-text-split-stream"] {
		to.Options.Text.SplitStream = from.Options.Text.SplitStream
	}
	if given["log-text-info-buffer-size"] {
		to.Options.Text.InfoBufferSize = from.Options.Text.InfoBufferSize
	}
	if given["log-json-split-stream"] {
		to.Options.JSON.SplitStream = from.Options.JSON.SplitStream
	}
	if given["log-json-info-buffer-size"] {
		to.Options.JSON.InfoBufferSize = from.Options.JSON.InfoBufferSize
	}
}

// flag.Value adapters for the types of the configuration.

type int32Value struct{ p *int32 }

func (v int32Value) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(int(*v.p))
}

func (v int32Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 32)
	if err != nil {
		return err
	}
	*v.p = int32(n)
	return nil
}

type uint32Value struct{ p *uint32 }

func (v uint32Value) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatUint(uint64(*v.p), 10)
}

func (v uint32Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return err
	}
	*v.p = uint32(n)
	return nil
}

type float32Value struct{ p *float32 }

func (v float32Value) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatFloat(float64(*v.p), 'g', -1, 32)
}

func (v float32Value) Set(s string) error {
	n, err := strconv.ParseFloat(s, 32)
	if err != nil {
		return err
	}
	*v.p = float32(n)
	return nil
}

type stringValue struct{ p *string }

func (v stringValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v stringValue) Set(s string) error { *v.p = s; return nil }

// sliceValue is pflag's StringSlice: comma-separated, and each use of the
// flag after the first appends.
type sliceValue struct{ p *[]string }

func (v sliceValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v sliceValue) Set(s string) error {
	for _, item := range strings.Split(s, ",") {
		*v.p = append(*v.p, strings.TrimSpace(item))
	}
	return nil
}

// gateValue is cliflag's MapStringBool: "A=true,B=false".
type gateValue struct{ p *map[string]bool }

func (v gateValue) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(*v.p)) {
		out = append(out, fmt.Sprintf("%s=%v", k, (*v.p)[k]))
	}
	return strings.Join(out, ",")
}

func (v gateValue) Set(s string) error {
	if *v.p == nil {
		*v.p = map[string]bool{}
	}
	for _, kv := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return fmt.Errorf("%q: want key=true or key=false", kv)
		}
		b, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("%q: %w", kv, err)
		}
		(*v.p)[k] = b
	}
	return nil
}

// vmoduleValue is logsapi's VModuleConfiguration flag: "pattern=N,...".
type vmoduleValue struct{ p *logsapi.VModuleConfiguration }

func (v vmoduleValue) String() string {
	if v.p == nil {
		return ""
	}
	var out []string
	for _, item := range *v.p {
		out = append(out, fmt.Sprintf("%s=%d", item.FilePattern, item.Verbosity))
	}
	return strings.Join(out, ",")
}

func (v vmoduleValue) Set(s string) error {
	for _, kv := range strings.Split(s, ",") {
		pat, n, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%q: want pattern=N", kv)
		}
		level, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			return fmt.Errorf("%q: %w", kv, err)
		}
		*v.p = append(*v.p, logsapi.VModuleItem{FilePattern: pat, Verbosity: logsapi.VerbosityLevel(level)})
	}
	return nil
}

// quantityValue is resource.QuantityValue's flag: 512, 1K, 2Ki.
type quantityValue struct{ p *resource.QuantityValue }

func (v quantityValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}

func (v quantityValue) Set(s string) error { return v.p.Set(s) }

// NormalizeArgs rewrites args, before fs.Parse, into what Go's flag package
// reads as kube-proxy's pflag command line reads them:
//
//   - an underscore in a flag's name is a dash (--hostname_override), as
//     component-base's cli.Run makes it for kube-proxy
//     (cliflag.WordSepNormalizeFunc);
//   - -v4, pflag's shorthand with its value attached, is -v=4.
//
// A value given as the argument after its flag (--config my_file) is left
// as it is, and so is everything after "--".
func NormalizeArgs(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			out = append(out, args[i:]...)
			break
		}
		dashes := "-"
		if strings.HasPrefix(a, "--") {
			dashes = "--"
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, dashes), "=")
		name = strings.ReplaceAll(name, "_", "-")
		if dashes == "-" && !hasValue && len(name) > 1 && name[0] == 'v' && fs.Lookup(name) == nil {
			if _, err := strconv.ParseUint(name[1:], 10, 32); err == nil {
				name, value, hasValue = "v", name[1:], true
			}
		}
		if hasValue {
			out = append(out, dashes+name+"="+value)
			continue
		}
		out = append(out, dashes+name)
		// A flag that takes a value and has none attached takes the next
		// argument, whatever it looks like.
		if fl := fs.Lookup(name); fl != nil && !isBoolFlag(fl) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

func isBoolFlag(fl *flag.Flag) bool {
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
