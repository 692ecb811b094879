package kubeproxyconfig

// Use is what svcproxy does with a field of KubeProxyConfiguration.
type Use int

const (
	// Honoured: svcproxy does what kube-proxy does with the field.
	Honoured Use = iota
	// Partly: some values are honoured, the others are reported (Ignored).
	Partly
	// Ignored: accepted, and reported when the file asks for something
	// with it.
	Ignored
)

func (u Use) String() string {
	return [...]string{"honoured", "partly", "ignored"}[u]
}

// Field is one field of the file, by its path (iptables.masqueradeBit).
type Field struct {
	Path string
	Use  Use
}

// Fields are every field of v1alpha1.KubeProxyConfiguration at
// k8s.io/kube-proxy v0.37.2 (Kubernetes v1.37.2), as docs/operations.md's
// table lists them; TestFields checks both against the Go type.
var Fields = []Field{
	{"kind", Honoured},
	{"apiVersion", Honoured},
	{"featureGates", Ignored},
	{"clientConnection.kubeconfig", Honoured},
	{"clientConnection.acceptContentTypes", Ignored},
	{"clientConnection.contentType", Partly},
	{"clientConnection.qps", Honoured},
	{"clientConnection.burst", Honoured},
	{"logging.format", Honoured},
	{"logging.flushFrequency", Honoured},
	{"logging.verbosity", Honoured},
	{"logging.vmodule", Ignored},
	{"logging.options.text.splitStream", Ignored},
	{"logging.options.text.infoBufferSize", Ignored},
	{"logging.options.json.splitStream", Ignored},
	{"logging.options.json.infoBufferSize", Ignored},
	{"hostnameOverride", Honoured},
	{"bindAddress", Honoured},
	{"healthzBindAddress", Honoured},
	{"metricsBindAddress", Honoured},
	{"bindAddressHardFail", Honoured},
	{"enableProfiling", Honoured},
	{"showHiddenMetricsForVersion", Ignored},
	{"mode", Honoured},
	{"iptables.masqueradeBit", Honoured},
	{"iptables.masqueradeAll", Honoured},
	{"iptables.localhostNodePorts", Partly},
	{"iptables.syncPeriod", Honoured},
	{"iptables.minSyncPeriod", Honoured},
	{"ipvs.syncPeriod", Honoured},
	{"ipvs.minSyncPeriod", Honoured},
	{"ipvs.scheduler", Honoured},
	{"ipvs.excludeCIDRs", Ignored},
	{"ipvs.strictARP", Honoured},
	{"ipvs.tcpTimeout", Ignored},
	{"ipvs.tcpFinTimeout", Ignored},
	{"ipvs.udpTimeout", Ignored},
	{"nftables.masqueradeBit", Honoured},
	{"nftables.masqueradeAll", Honoured},
	{"nftables.syncPeriod", Honoured},
	{"nftables.minSyncPeriod", Honoured},
	{"winkernel.networkName", Ignored},
	{"winkernel.sourceVip", Ignored},
	{"winkernel.enableDSR", Ignored},
	{"winkernel.rootHnsEndpointName", Ignored},
	{"winkernel.forwardHealthCheckVip", Ignored},
	{"detectLocalMode", Partly},
	{"detectLocal.bridgeInterface", Ignored},
	{"detectLocal.interfaceNamePrefix", Ignored},
	{"clusterCIDR", Honoured},
	{"nodePortAddresses", Honoured},
	{"oomScoreAdj", Honoured},
	{"conntrack.maxPerCore", Ignored},
	{"conntrack.min", Ignored},
	{"conntrack.tcpEstablishedTimeout", Ignored},
	{"conntrack.tcpCloseWaitTimeout", Ignored},
	{"conntrack.tcpBeLiberal", Ignored},
	{"conntrack.udpTimeout", Ignored},
	{"conntrack.udpStreamTimeout", Ignored},
	{"configSyncPeriod", Ignored},
	{"portRange", Honoured},
	{"windowsRunAsService", Ignored},
}
