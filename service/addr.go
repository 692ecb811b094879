package service

import (
	"net/netip"
	"strings"

	netutils "k8s.io/utils/net"
)

// ParseAddr parses an IP address as kube-proxy does (netutils.ParseIPSloppy): an IPv4
// address may have leading zeros, read as decimal. "172.30.0.041" is 172.30.0.41, never
// the octal 172.30.0.33. The API server has refused such addresses since Kubernetes
// 1.20, but objects written before then still hold them, and kube-proxy serves them;
// so does svcproxy, with the same reading. Zones ("fe80::1%eth0") are refused.
func ParseAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, a.Zone() == ""
	}
	if strings.Contains(s, ":") {
		return netip.Addr{}, false // only IPv4 has the legacy form
	}
	ip := netutils.ParseIPSloppy(s)
	if ip == nil {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(ip.To4())
	return a, ok
}

// ParsePrefix parses a CIDR as ParseAddr parses its address, and masks it:
// "203.0.113.010/24" is 203.0.113.0/24.
func ParsePrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	_, n, err := netutils.ParseCIDRSloppy(s)
	if err != nil || n.IP.To4() == nil {
		return netip.Prefix{}, false
	}
	a, _ := netip.AddrFromSlice(n.IP.To4())
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a, ones), true
}

// mustParseAddr is ParseAddr for strings that validation has accepted.
func mustParseAddr(s string) netip.Addr {
	a, ok := ParseAddr(s)
	if !ok {
		panic("service: unvalidated address " + s)
	}
	return a
}
