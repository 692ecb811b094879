package nftables

import "github.com/svcproxy/svcproxy/offload/kernelsync"

// PortStatus is what /status shows of one service port on the nftables path:
// its chains and, per endpoint, the share of new connections its numgen rule
// gives it (kernelsync.PortStatus, shared with iptables mode).
type PortStatus = kernelsync.PortStatus

// EndpointStatus is one endpoint of a service- or local- chain.
type EndpointStatus = kernelsync.EndpointStatus
