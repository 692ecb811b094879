package conntrack

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Interface deletes conntrack entries.
type Interface interface {
	// Delete removes every entry that matches f and returns how many it removed.
	// No match is not an error.
	Delete(ctx context.Context, f Filter) (int, error)
	// DeleteStale removes every entry s selects, in one pass over s.Family's
	// table, and returns how many it removed.
	DeleteStale(ctx context.Context, s Stale) (int, error)
}

// Filter selects entries. Zero fields match anything; Protocol is required.
type Filter struct {
	// Protocol is "udp", "tcp" or "sctp".
	Protocol string
	// OrigDst and OrigDstPort are the destination the client sent to: a ClusterIP,
	// an external IP, a node address (conntrack --orig-dst, --orig-port-dst).
	OrigDst     netip.Addr
	OrigDstPort uint16
	// DstNAT is the address the entry was DNATed to: the endpoint (conntrack
	// --dst-nat; the reply's source).
	DstNAT netip.Addr
	// Family is the table searched by a filter that names no address (a
	// NodePort's entries, by port only): IPv4 or IPv6 (conntrack -f ipv6);
	// empty, both. A filter that names an address searches its family.
	Family Family
}

// Family is an IP family: conntrack keeps one table per family.
type Family string

// The families.
const (
	IPv4 Family = "IPv4"
	IPv6 Family = "IPv6"
)

// String is the filter in conntrack(8)'s words, for log lines:
// "-p udp --orig-dst 198.18.0.53 --orig-port-dst 53 --dst-nat 198.19.1.10".
func (f Filter) String() string {
	a := []string{"-p", f.Protocol}
	if f.Family == IPv6 {
		a = append([]string{"-f", "ipv6"}, a...)
	}
	if f.OrigDst.IsValid() {
		a = append(a, "--orig-dst", f.OrigDst.String())
	}
	if f.OrigDstPort != 0 {
		a = append(a, "--orig-port-dst", strconv.Itoa(int(f.OrigDstPort)))
	}
	if f.DstNAT.IsValid() {
		a = append(a, "--dst-nat", f.DstNAT.String())
	}
	return strings.Join(a, " ")
}

// protocols are the IP protocol numbers of the protocols a Filter names.
var protocols = map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132}

func (f Filter) validate() error {
	if _, ok := protocols[f.Protocol]; !ok {
		return fmt.Errorf("conntrack filter: protocol %q: want udp, tcp or sctp", f.Protocol)
	}
	if f.OrigDst.IsValid() && f.DstNAT.IsValid() && f.OrigDst.Is4() != f.DstNAT.Is4() {
		return fmt.Errorf("conntrack filter %s: addresses of two families", f)
	}
	switch f.Family {
	case "", IPv4, IPv6:
	default:
		return fmt.Errorf("conntrack filter %s: family %q: want IPv4 or IPv6", f, f.Family)
	}
	for _, a := range []netip.Addr{f.OrigDst, f.DstNAT} {
		if a.IsValid() && f.Family != "" && a.Is4() != (f.Family == IPv4) {
			return fmt.Errorf("conntrack filter %s: %s is not an %s address", f, a, f.Family)
		}
	}
	return nil
}
