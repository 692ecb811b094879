package iptables

import "github.com/svcproxy/svcproxy/offload/kernelsync"

// PortStatus is what /status shows of one service port on the iptables path:
// its SVCP- chains and, per endpoint, the statistic probability of its rule and
// the share of new connections that makes (kernelsync.PortStatus, shared with
// nftables mode).
type PortStatus = kernelsync.PortStatus

// EndpointStatus is one endpoint rule of a SVCP-SVC- or SVCP-SVL- chain.
type EndpointStatus = kernelsync.EndpointStatus
