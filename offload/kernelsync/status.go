package kernelsync

// PortStatus is what /status shows of one service port on a rule-writing
// kernel path, as the last sync applied it.
type PortStatus struct {
	Port     string `json:"port"` // "default/web:http"
	Protocol string `json:"protocol"`
	// Chains are the port's own chains, as applied (iptables: SVCP-SVC-,
	// SVCP-SVL-, SVCP-EXT-, SVCP-FW-, SVCP-SEP-; nftables: service-, local-,
	// external-, firewall-, endpoint-).
	Chains []string `json:"chains"`
	// HasEndpoints is false when the port's traffic is rejected.
	HasEndpoints bool             `json:"hasEndpoints"`
	Endpoints    []EndpointStatus `json:"endpoints"`
}

// EndpointStatus is one endpoint rule of a policy chain. An endpoint that
// serves both the cluster and the local policy appears twice.
type EndpointStatus struct {
	Addr string `json:"addr"`
	Node string `json:"node,omitempty"`
	From string `json:"from"` // the policy chain (SVCP-SVC- or SVCP-SVL-; service- or local-)
	// Chain is the chain of the endpoint's DNAT rule: its own (SVCP-SEP-;
	// nftables: endpoint-, with ClientIP affinity) or, in nftables mode
	// without affinity, the policy chain itself.
	Chain string `json:"chain"`
	// Probability is the statistic match of iptables' rule as written ("1":
	// the last rule, unconditional); nftables picks with one numgen rule and
	// has none.
	Probability string `json:"probability,omitempty"`
	// Share is the fraction of new connections the endpoint gets.
	Share       float64 `json:"share"`
	Terminating bool    `json:"terminating,omitempty"`
}
