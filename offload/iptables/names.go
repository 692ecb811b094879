package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/service"
)

// Tables we write to: nat and filter; mangle only holds the canary.
const (
	tableNAT    = "nat"
	tableFilter = "filter"
	tableMangle = "mangle"
)

// chainCanary is an empty chain a full sync declares in mangle, nat and
// filter, and whose absence from mangle tells the periodic check that another
// program reset the tables (Dataplane.check): kube-proxy's
// KUBE-PROXY-CANARY (pkg/proxy/iptables, kubeProxyCanaryChain). mangle is
// written last, so its canary is there only once the others are.
const chainCanary = "SVCP-PROXY-CANARY"

// canaryTables are the tables a full sync declares the canary in, in the
// order it writes them: the first two with their rules, mangle after them.
var canaryTables = []string{tableFilter, tableNAT, tableMangle}

// The chains every sync writes whole ("top" chains). Their names are fixed; the
// userspace proxier and other dataplanes must not use them.
const (
	chainServices         = "SVCP-SERVICES"          // nat: VIP -> service chain; filter: REJECT ClusterIPs with no endpoints
	chainNodePorts        = "SVCP-NODEPORTS"         // nat: node port -> external chain
	chainPostrouting      = "SVCP-POSTROUTING"       // nat: MASQUERADE what is marked
	chainMarkMasq         = "SVCP-MARK-MASQ"         // nat: set the masquerade mark
	chainExternalServices = "SVCP-EXTERNAL-SERVICES" // filter: REJECT external destinations with no endpoints
	chainForward          = "SVCP-FORWARD"           // filter: accept marked service traffic when FORWARD's policy is DROP
)

// Prefixes of the per-service-port chains. A chain with one of these prefixes that
// no service port claims is stale and a full sync deletes it.
const (
	prefixSVC = "SVCP-SVC-" // cluster policy: every usable endpoint
	prefixSVL = "SVCP-SVL-" // local policy: the endpoints on this node
	prefixEXT = "SVCP-EXT-" // external destinations (NodePort, externalIPs, LoadBalancer)
	prefixFW  = "SVCP-FW-"  // LoadBalancer IPs with loadBalancerSourceRanges: allowed sources
	prefixSEP = "SVCP-SEP-" // one endpoint: DNAT
)

var portChainPrefixes = []string{prefixSVC, prefixSVL, prefixEXT, prefixFW, prefixSEP}

// prefixCIP names a ClusterIP block chain of a large cluster (clusterIPBlock):
// the ClusterIP jumps of the ports whose ClusterIP is in one /24 (IPv6: /120),
// which SVCP-SERVICES reaches by one rule matching the block.
const prefixCIP = "SVCP-CIP-"

// clusterIPBlock is the block of ip (/24, or /120 for IPv6) and the name of
// its chain: kube-proxy's hash of the block, so the name is the same in every
// process.
func clusterIPBlock(ip netip.Addr) (netip.Prefix, string) {
	bits := 24
	if ip.Is6() {
		bits = 120
	}
	b, _ := ip.Prefix(bits) // bits is within the address's length
	return b, prefixCIP + hashBase(b.String())
}

// isPortChain reports whether a chain name is one of our per-port chains.
func isPortChain(name string) bool {
	for _, p := range portChainPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// topChains are the fixed chains per table, in the order they are declared.
var topChains = map[string][]string{
	tableFilter: {chainServices, chainExternalServices, chainForward},
	tableNAT:    {chainServices, chainNodePorts, chainPostrouting, chainMarkMasq},
}

// isOurChain reports whether a chain of table belongs to this package.
func isOurChain(table, name string) bool {
	if name == chainCanary {
		return true
	}
	for _, c := range topChains[table] {
		if c == name {
			return true
		}
	}
	return table == tableNAT && (isPortChain(name) || strings.HasPrefix(name, prefixCIP))
}

// hashBase is kube-proxy's servicePortChainNameBase: the first 16 characters of the
// base32 SHA-256 of the port name and the lower-case protocol. Stable across
// restarts and processes, so a new Dataplane finds the chains of the old one.
func hashBase(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "")))
	return base32.StdEncoding.EncodeToString(h[:])[:16]
}

func portHash(n service.PortName) string {
	return hashBase(n.String(), strings.ToLower(string(n.Protocol)))
}

// sepChain is kube-proxy's servicePortEndpointChainName: the hash also covers the
// endpoint, so each endpoint of each port has its own chain (and its own ClientIP
// affinity list, which the recent match names after the chain).
func sepChain(n service.PortName, ep netip.AddrPort) string {
	return prefixSEP + hashBase(n.String(), strings.ToLower(string(n.Protocol)), ep.String())
}

// hook is a jump from a built-in chain to one of ours. A --noflush restore
// appends and cannot "ensure", so a full sync inserts only the hooks the
// kernel lacks (missingHooks, hooks.go) in its restore, and Cleanup deletes
// them.
type hook struct {
	table, chain string // the built-in chain
	args         []string
}

// hooks, in kube-proxy's iptablesJumpChains order. Each is prepended, so the offload
// jump sits before the userspace portal chain (package hybrid: promote kernel first).
var hooks = []hook{
	{tableFilter, "FORWARD", []string{"-m", "comment", "--comment", "svcproxy service portals", "-j", chainServices}},
	{tableFilter, "OUTPUT", []string{"-m", "comment", "--comment", "svcproxy service portals", "-j", chainServices}},
	{tableFilter, "INPUT", []string{"-m", "comment", "--comment", "svcproxy externally-visible service portals", "-j", chainExternalServices}},
	{tableFilter, "FORWARD", []string{"-m", "comment", "--comment", "svcproxy externally-visible service portals", "-j", chainExternalServices}},
	{tableFilter, "FORWARD", []string{"-m", "comment", "--comment", "svcproxy forwarding rules", "-j", chainForward}},
	{tableNAT, "PREROUTING", []string{"-m", "comment", "--comment", "svcproxy service portals", "-j", chainServices}},
	{tableNAT, "OUTPUT", []string{"-m", "comment", "--comment", "svcproxy service portals", "-j", chainServices}},
	{tableNAT, "POSTROUTING", []string{"-m", "comment", "--comment", "svcproxy postrouting rules", "-j", chainPostrouting}},
}
