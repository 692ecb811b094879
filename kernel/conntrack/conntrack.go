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
}

// String is the filter in conntrack(8)'s words, for log lines:
// "-p udp --orig-dst 198.18.0.53 --orig-port-dst 53 --dst-nat 198.19.1.10".
func (f Filter) String() string {
	a := []string{"-p", f.Protocol}
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
	return nil
}
