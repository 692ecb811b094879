package kubeproxyconfig

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Why svcproxy leaves each field alone that it accepts and does not act on.
// docs/operations.md's table says the same, field by field.
const (
	whyFeatureGates  = "svcproxy has no feature gates: what it does is fixed by its version and its flags"
	whyContentType   = "svcproxy's client always sends protobuf and accepts protobuf, then JSON"
	whyVModule       = "svcproxy logs through log/slog at one level for the whole program"
	whyLogOptions    = "svcproxy writes every log line at once, to stderr"
	whyHiddenMetrics = "svcproxy hides no metric"
	whyLocalhostNP   = "svcproxy never sets route_localnet (CVE-2020-8558): NodePorts answer on 127.0.0.1 only in nftables mode with localhost in nodePortAddresses, through userspace listeners"
	whyExcludeCIDRs  = "svcproxy only ever deletes the virtual servers it made (addresses on its dummy interface, NodePorts on the node's addresses): another program's are never touched"
	whyIPVSTimeouts  = "svcproxy leaves IPVS's timeouts as the kernel has them (ipvsadm --set)"
	whyWindows       = "a Windows setting: svcproxy runs on Linux only"
	whyDetectLocal   = "svcproxy tells pod traffic by clusterCIDR only"
	whyConntrack     = "svcproxy changes no conntrack sysctl: set net.netfilter.nf_conntrack_* in the node's own sysctl configuration"
	whyConfigSync    = "svcproxy's informers never resync: the watch rebuilds its Snapshot from their caches every syncPeriod instead"
)

// ignored records every field that asks for something svcproxy does not do:
// a field at its zero value, or at a value that makes kube-proxy do
// nothing, is not recorded.
func (m *mapper) ignored() {
	c := m.cfg
	if len(c.FeatureGates) > 0 {
		var gates []string
		for _, k := range slices.Sorted(maps.Keys(c.FeatureGates)) {
			gates = append(gates, fmt.Sprintf("%s=%v", k, c.FeatureGates[k]))
		}
		m.ignore("featureGates", strings.Join(gates, ","), whyFeatureGates)
	}
	if a := c.ClientConnection.AcceptContentTypes; a != "" {
		m.ignore("clientConnection.acceptContentTypes", a, whyContentType)
	}
	if ct := c.ClientConnection.ContentType; ct != "application/vnd.kubernetes.protobuf" {
		m.ignore("clientConnection.contentType", ct, whyContentType)
	}
	if len(c.Logging.VModule) > 0 {
		m.ignore("logging.vmodule", fmt.Sprint(c.Logging.VModule), whyVModule)
	}
	text, json := c.Logging.Options.Text, c.Logging.Options.JSON
	for _, o := range []struct {
		field string
		split bool
		size  int64
	}{
		{"logging.options.text", text.SplitStream, text.InfoBufferSize.Value()},
		{"logging.options.json", json.SplitStream, json.InfoBufferSize.Value()},
	} {
		if o.split {
			m.ignore(o.field+".splitStream", "true", whyLogOptions)
		}
		if o.size != 0 {
			m.ignore(o.field+".infoBufferSize", fmt.Sprint(o.size), whyLogOptions)
		}
	}
	if v := c.ShowHiddenMetricsForVersion; v != "" {
		m.ignore("showHiddenMetricsForVersion", v, whyHiddenMetrics)
	}
	// kube-proxy's iptables mode alone serves NodePorts on 127.0.0.1 with it.
	if lnp := c.IPTables.LocalhostNodePorts; lnp != nil && *lnp && m.o.Mode == ModeIPTables {
		m.ignore("iptables.localhostNodePorts", "true", whyLocalhostNP)
	}
	if len(c.IPVS.ExcludeCIDRs) > 0 {
		m.ignore("ipvs.excludeCIDRs", strings.Join(c.IPVS.ExcludeCIDRs, ","), whyExcludeCIDRs)
	}
	m.ignoreDuration("ipvs.tcpTimeout", c.IPVS.TCPTimeout, whyIPVSTimeouts)
	m.ignoreDuration("ipvs.tcpFinTimeout", c.IPVS.TCPFinTimeout, whyIPVSTimeouts)
	m.ignoreDuration("ipvs.udpTimeout", c.IPVS.UDPTimeout, whyIPVSTimeouts)
	w := c.Winkernel
	for _, f := range []struct{ field, value string }{
		{"winkernel.networkName", w.NetworkName},
		{"winkernel.sourceVip", w.SourceVip},
		{"winkernel.enableDSR", boolValue(w.EnableDSR)},
		{"winkernel.rootHnsEndpointName", w.RootHnsEndpointName},
		{"winkernel.forwardHealthCheckVip", boolValue(w.ForwardHealthCheckVip)},
		{"windowsRunAsService", boolValue(c.WindowsRunAsService)},
	} {
		if f.value != "" {
			m.ignore(f.field, f.value, whyWindows)
		}
	}
	m.detectLocal()
	m.conntrack()
	m.ignoreDuration("configSyncPeriod", c.ConfigSyncPeriod, whyConfigSync)
}

// detectLocal checks detectLocalMode as validateDetectLocalMode does and
// records the modes svcproxy does not have.
func (m *mapper) detectLocal() {
	c := m.cfg
	switch mode := string(c.DetectLocalMode); mode {
	case "ClusterCIDR":
	case "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix":
		m.ignore("detectLocalMode", mode, whyDetectLocal+" (clusterCIDR "+fmt.Sprintf("%q", c.ClusterCIDR)+" is used instead)")
	default:
		m.fail("detectLocalMode", "%q: want ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix", mode)
	}
	if b := c.DetectLocal.BridgeInterface; b != "" {
		m.ignore("detectLocal.bridgeInterface", b, whyDetectLocal)
	}
	if p := c.DetectLocal.InterfaceNamePrefix; p != "" {
		m.ignore("detectLocal.interfaceNamePrefix", p, whyDetectLocal)
	}
}

// conntrack records the conntrack settings kube-proxy would write
// (conntrack.SetSysctls): maxPerCore 0 leaves nf_conntrack_max, and min
// with it, as they are; a zero timeout leaves its sysctl.
func (m *mapper) conntrack() {
	ct := m.cfg.Conntrack
	if ct.MaxPerCore != nil && *ct.MaxPerCore != 0 {
		m.ignore("conntrack.maxPerCore", fmt.Sprint(*ct.MaxPerCore), whyConntrack)
		if ct.Min != nil && *ct.Min != 0 {
			m.ignore("conntrack.min", fmt.Sprint(*ct.Min), whyConntrack)
		}
	}
	if d := ct.TCPEstablishedTimeout; d != nil {
		m.ignoreDuration("conntrack.tcpEstablishedTimeout", *d, whyConntrack)
	}
	if d := ct.TCPCloseWaitTimeout; d != nil {
		m.ignoreDuration("conntrack.tcpCloseWaitTimeout", *d, whyConntrack)
	}
	if ct.TCPBeLiberal {
		m.ignore("conntrack.tcpBeLiberal", "true", whyConntrack)
	}
	m.ignoreDuration("conntrack.udpTimeout", ct.UDPTimeout, whyConntrack)
	m.ignoreDuration("conntrack.udpStreamTimeout", ct.UDPStreamTimeout, whyConntrack)
}

func (m *mapper) ignoreDuration(field string, d metav1.Duration, reason string) {
	if d.Duration != 0 {
		m.ignore(field, d.Duration.String(), reason)
	}
}

func boolValue(b bool) string {
	if b {
		return "true"
	}
	return ""
}
