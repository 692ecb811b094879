package nftables

// PortStatus is what /status shows of one service port on the nftables path.
type PortStatus struct {
	Port     string `json:"port"` // "default/web:http"
	Protocol string `json:"protocol"`
	// Chains are the port's own chains (service-, local-, external-, firewall-,
	// endpoint-), as applied.
	Chains []string `json:"chains"`
	// HasEndpoints is false when the port's traffic is rejected.
	HasEndpoints bool             `json:"hasEndpoints"`
	Endpoints    []EndpointStatus `json:"endpoints"`
}

// EndpointStatus is one endpoint rule of a policy chain. An endpoint that serves
// both the cluster and the local policy appears twice.
type EndpointStatus struct {
	Addr        string  `json:"addr"`
	Node        string  `json:"node,omitempty"`
	From        string  `json:"from"`  // the policy chain (service- or local-)
	Chain       string  `json:"chain"` // the endpoint's endpoint- chain
	Share       float64 `json:"share"` // the fraction of new connections it gets
	Terminating bool    `json:"terminating,omitempty"`
}
