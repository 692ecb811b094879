package nftables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/service"
)

// Table is the name of svcproxy's table, in the ip family: `ip svcproxy`. Nothing
// else writes to it, and nothing of ours lives outside it.
const Table = "svcproxy"

// Base chains: where the table hooks into the packet's path, at kube-proxy's
// priorities except for NAT (see natPriority).
const (
	chainFilterPrerouting     = "filter-prerouting"
	chainFilterInput          = "filter-input"
	chainFilterForward        = "filter-forward"
	chainFilterOutput         = "filter-output"
	chainFilterOutputPostDNAT = "filter-output-post-dnat"
	chainNATPrerouting        = "nat-prerouting"
	chainNATOutput            = "nat-output"
	chainNATPostrouting       = "nat-postrouting"
)

// Regular chains every sync writes whole.
const (
	chainServices               = "services"                 // ClusterIPs, externalIPs, LB IPs, NodePorts -> their chains
	chainServiceEndpointsCheck  = "service-endpoints-check"  // REJECT/DROP what has no endpoints
	chainNodePortEndpointsCheck = "nodeport-endpoints-check" // the same for NodePorts
	chainFirewallCheck          = "firewall-check"           // loadBalancerSourceRanges
	chainClusterIPsCheck        = "cluster-ips-check"        // a ClusterIP's ports that no Service has
	chainMarkMasq               = "mark-for-masquerade"
	chainMasquerading           = "masquerading"
	chainReject                 = "reject-chain" // maps cannot say "reject": they say goto reject-chain
)

// Localhost NodePorts (Config.LocalhostNodePorts), kube-proxy's names
// (pkg/proxy/nftables: localhostNodePortRejectMap,
// localhostNodePortRejectChainName; pkg/proxy/metrics:
// LocalhostNodePortRejectedCounterName): the map of the node ports whose
// packets to loopback are rejected, and per protocol a chain that counts and
// rejects them.
const (
	mapLocalhostNodePortReject = "localhost-nodeport-reject-ports"
	prefixLocalhostReject      = "localhost-nodeport-reject-"   // + "udp", "sctp": the chain
	prefixLocalhostRejected    = "localhost-nodeport-rejected-" // + "udp", "sctp": the named counter
)

// localhostRejected are the protocols whose localhost NodePorts are rejected
// and counted: those the userspace listeners cannot serve (kube-proxy's
// LocalhostNodePortRejectedProtocols).
var localhostRejected = []string{"udp", "sctp"}

// Sets and maps.
const (
	setClusterIPs         = "cluster-ips"
	setNodePortIPs        = "nodeport-ips"
	setHairpin            = "hairpin"
	mapServiceIPs         = "service-ips"
	mapServiceNodePorts   = "service-nodeports"
	mapNoEndpointServices = "no-endpoint-services"
	mapNoEndpointNodePort = "no-endpoint-nodeports"
	mapFirewallIPs        = "firewall-ips"
)

// Prefixes of the per-service-port chains and sets. One with a prefix that no
// service port claims is stale, and a full sync deletes it.
const (
	prefixService  = "service-"     // cluster policy: every usable endpoint
	prefixLocal    = "local-"       // local policy: the endpoints on this node
	prefixExternal = "external-"    // NodePort, externalIPs, LoadBalancer IPs
	prefixFirewall = "firewall-"    // loadBalancerSourceRanges
	prefixEndpoint = "endpoint-"    // one endpoint: DNAT
	prefixAffinity = "affinity-"    // a set: the clients of one endpoint (ClientIP affinity)
	prefixCounter  = "connections-" // a named counter: one port's new connections (CountConnections)
)

var portChainPrefixes = []string{prefixService, prefixLocal, prefixExternal, prefixFirewall, prefixEndpoint}

// isPortChain reports whether a chain belongs to a service port: a port prefix,
// and the port's "namespace/name" (no fixed chain has a "/").
func isPortChain(name string) bool {
	for _, p := range portChainPrefixes {
		if strings.HasPrefix(name, p) && strings.Contains(name, "/") {
			return true
		}
	}
	return false
}

// hashBase is kube-proxy's hashAndTruncate for nftables names: 8 characters of the
// base32 SHA-256, enough to tell apart names that the readable part alone might
// not (nft names are not limited to 28 characters, so the rest stays readable).
func hashBase(s string) string {
	h := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(h[:])[:8]
}

// portBase is kube-proxy's servicePortChainNameBase: "HASH-ns/name/proto/port".
func portBase(n service.PortName) string {
	s := n.Namespace + "/" + n.Name + "/" + strings.ToLower(string(n.Protocol)) + "/" + n.Port
	return hashBase(s) + "-" + s
}

// endpointBase is kube-proxy's servicePortEndpointChainNameBase:
// "HASH-ns/name/proto/port__ip/port". An IPv6 address has its colons replaced by
// dots ("2001.db8.19..2.2"): nft refuses a ':' in a chain name.
func endpointBase(n service.PortName, ep netip.AddrPort) string {
	s := n.Namespace + "/" + n.Name + "/" + strings.ToLower(string(n.Protocol)) + "/" + n.Port +
		"__" + strings.ReplaceAll(ep.Addr().Unmap().String(), ":", ".") + "/" + itoa(ep.Port())
	return hashBase(s) + "-" + s
}
