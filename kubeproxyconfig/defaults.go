package kubeproxyconfig

import (
	"net"
	"net/netip"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
)

// kube-proxy's ports (k8s.io/kubernetes pkg/cluster/ports: ProxyHealthzPort,
// ProxyStatusPort) and its OOM score (pkg/kubelet/qos: KubeProxyOOMScoreAdj).
const (
	healthzPort = 10256
	metricsPort = 10249
	oomScoreAdj = -999
)

// Default fills in what cfg leaves unset, as kube-proxy v1.37.2's
// SetDefaults_KubeProxyConfiguration (k8s.io/kubernetes,
// pkg/proxy/apis/config/v1alpha1/defaults.go) does, line for line, in its
// order. Like that function it leaves mode, detectLocalMode and
// nodePortAddresses alone: kube-proxy fills them in later, after flags and
// file are merged (platformApplyDefaults; here PlatformDefaults).
func Default(cfg *v1alpha1.KubeProxyConfiguration) {
	if cfg.BindAddress == "" {
		cfg.BindAddress = "0.0.0.0"
	}
	healthzHost, metricsHost := defaultHosts(cfg.BindAddress)
	if cfg.HealthzBindAddress == "" {
		cfg.HealthzBindAddress = healthzHost + ":" + strconv.Itoa(healthzPort)
	} else {
		cfg.HealthzBindAddress = appendPortIfNeeded(cfg.HealthzBindAddress, healthzPort)
	}
	if cfg.MetricsBindAddress == "" {
		cfg.MetricsBindAddress = metricsHost + ":" + strconv.Itoa(metricsPort)
	} else {
		cfg.MetricsBindAddress = appendPortIfNeeded(cfg.MetricsBindAddress, metricsPort)
	}
	if cfg.OOMScoreAdj == nil {
		cfg.OOMScoreAdj = ptr[int32](oomScoreAdj)
	}
	defaultDuration(&cfg.IPTables.SyncPeriod, 30*time.Second)
	defaultDuration(&cfg.IPTables.MinSyncPeriod, time.Second)
	if cfg.IPTables.LocalhostNodePorts == nil {
		cfg.IPTables.LocalhostNodePorts = ptr(true)
	}
	// Only the IPVS syncPeriod: kube-proxy leaves ipvs.minSyncPeriod at 0.
	defaultDuration(&cfg.IPVS.SyncPeriod, 30*time.Second)
	defaultDuration(&cfg.NFTables.SyncPeriod, 30*time.Second)
	defaultDuration(&cfg.NFTables.MinSyncPeriod, time.Second)
	if cfg.Conntrack.MaxPerCore == nil {
		cfg.Conntrack.MaxPerCore = ptr[int32](32 * 1024)
	}
	if cfg.Conntrack.Min == nil {
		cfg.Conntrack.Min = ptr[int32](128 * 1024)
	}
	if cfg.IPTables.MasqueradeBit == nil {
		cfg.IPTables.MasqueradeBit = ptr[int32](14)
	}
	if cfg.NFTables.MasqueradeBit == nil {
		cfg.NFTables.MasqueradeBit = ptr[int32](14)
	}
	if cfg.Conntrack.TCPEstablishedTimeout == nil {
		cfg.Conntrack.TCPEstablishedTimeout = &metav1.Duration{Duration: 24 * time.Hour}
	}
	if cfg.Conntrack.TCPCloseWaitTimeout == nil {
		cfg.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{Duration: time.Hour}
	}
	defaultDuration(&cfg.ConfigSyncPeriod, 15*time.Minute)
	if cfg.ClientConnection.ContentType == "" {
		cfg.ClientConnection.ContentType = "application/vnd.kubernetes.protobuf"
	}
	if cfg.ClientConnection.QPS == 0 {
		cfg.ClientConnection.QPS = 5
	}
	if cfg.ClientConnection.Burst == 0 {
		cfg.ClientConnection.Burst = 10
	}
	if cfg.FeatureGates == nil {
		cfg.FeatureGates = map[string]bool{}
	}
	logsapi.SetRecommendedLoggingConfiguration(&cfg.Logging)
}

// defaultHosts are the hosts of the default health and metrics addresses:
// IPv4's unless bindAddress is an IPv6 address (getDefaultAddresses, the
// same file; an unparsable bindAddress counts as IPv6 there too).
func defaultHosts(bindAddress string) (healthz, metrics string) {
	if a, err := netip.ParseAddr(bindAddress); err == nil && a.Unmap().Is4() {
		return "0.0.0.0", "127.0.0.1"
	}
	if ip := net.ParseIP(bindAddress); ip != nil && ip.To4() != nil {
		return "0.0.0.0", "127.0.0.1" // netutils.ParseIPSloppy also takes leading zeros
	}
	return "[::]", "[::1]"
}

// appendPortIfNeeded adds port to an address that is an IP alone
// (pkg/proxy/util AppendPortIfNeeded): "0.0.0.0" -> "0.0.0.0:10256",
// "::" -> "[::]:10256"; anything else is left for validation.
func appendPortIfNeeded(addr string, port int) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	ip := net.ParseIP(addr)
	if ip == nil {
		return addr
	}
	return net.JoinHostPort(addr, strconv.Itoa(port))
}

func defaultDuration(d *metav1.Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

func ptr[T any](v T) *T { return &v }
