package iptables

// PortStatus is what /status shows of one service port on the iptables path.
type PortStatus struct {
	Port     string `json:"port"` // "default/web:http"
	Protocol string `json:"protocol"`
	// Chains are the port's own nat chains (SVCP-SVC-, SVCP-SVL-, SVCP-EXT-,
	// SVCP-SEP-), as applied.
	Chains []string `json:"chains"`
	// HasEndpoints is false when the port's traffic is rejected.
	HasEndpoints bool             `json:"hasEndpoints"`
	Endpoints    []EndpointStatus `json:"endpoints"`
}

// EndpointStatus is one endpoint rule of a policy chain. An endpoint that serves
// both the cluster and the local policy appears twice.
type EndpointStatus struct {
	Addr  string `json:"addr"`
	Node  string `json:"node,omitempty"`
	From  string `json:"from"`  // the policy chain (SVCP-SVC- or SVCP-SVL-)
	Chain string `json:"chain"` // the endpoint's SVCP-SEP- chain
	// Probability is the statistic match of the rule as written ("1": the last
	// rule, unconditional); Share is the resulting fraction of new connections.
	Probability string  `json:"probability"`
	Share       float64 `json:"share"`
	Terminating bool    `json:"terminating,omitempty"`
}
