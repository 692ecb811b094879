package conntrack

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Netlink deletes entries through the kernel's conntrack netlink interface
// (ctnetlink), as kube-proxy does since it stopped running conntrack(8). Each
// Delete opens a netlink socket on the calling thread, so it acts on that
// thread's network namespace (like every call of package iptables): svcproxy's
// own, or a test's inside netnstest.NS.Do. The zero value is ready to use.
type Netlink struct{}

var _ Interface = Netlink{}

// Delete implements Interface: it dumps the table of f's family (both, when f
// names no address) and deletes the entries f matches, in one pass.
func (Netlink) Delete(ctx context.Context, f Filter) (int, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	nf := &netlink.ConntrackFilter{}
	if err := nf.AddProtocol(protocols[f.Protocol]); err != nil {
		return 0, fmt.Errorf("conntrack delete %s: %w", f, err)
	}
	if f.OrigDst.IsValid() {
		if err := nf.AddIP(netlink.ConntrackOrigDstIP, net.IP(f.OrigDst.AsSlice())); err != nil {
			return 0, fmt.Errorf("conntrack delete %s: %w", f, err)
		}
	}
	if f.OrigDstPort != 0 {
		if err := nf.AddPort(netlink.ConntrackOrigDstPort, f.OrigDstPort); err != nil {
			return 0, fmt.Errorf("conntrack delete %s: %w", f, err)
		}
	}
	if f.DstNAT.IsValid() {
		// A DNATed entry's reply comes from the endpoint.
		if err := nf.AddIP(netlink.ConntrackReplySrcIP, net.IP(f.DstNAT.AsSlice())); err != nil {
			return 0, fmt.Errorf("conntrack delete %s: %w", f, err)
		}
	}
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return 0, fmt.Errorf("conntrack delete %s: netlink: %w", f, err)
	}
	defer h.Close()
	total := 0
	for _, family := range families(f) {
		n, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, family, nf)
		total += int(n)
		if err != nil {
			return total, fmt.Errorf("conntrack delete %s: %w", f, err)
		}
	}
	return total, nil
}

// DeleteStale implements Interface: it dumps s.Family's table and deletes the
// UDP entries s selects, in one pass.
func (Netlink) DeleteStale(ctx context.Context, s Stale) (int, error) {
	if err := s.validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return 0, fmt.Errorf("conntrack: delete %s: netlink: %w", s, err)
	}
	defer h.Close()
	n, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, family(s.Family == IPv4), staleFilter{s})
	if err != nil {
		return int(n), fmt.Errorf("conntrack: delete %s: %w", s, err)
	}
	return int(n), nil
}

// staleFilter is Stale as a netlink.CustomConntrackFilter.
type staleFilter struct{ s Stale }

func (f staleFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	dst, ok1 := netip.AddrFromSlice(flow.Forward.DstIP)
	src, ok2 := netip.AddrFromSlice(flow.Reverse.SrcIP)
	if !ok1 || !ok2 {
		return false
	}
	return f.s.matches(netip.AddrPortFrom(dst.Unmap(), flow.Forward.DstPort), src.Unmap())
}

// families are the address families whose tables f can match.
func families(f Filter) []netlink.InetFamily {
	switch {
	case f.OrigDst.IsValid():
		return []netlink.InetFamily{family(f.OrigDst.Is4())}
	case f.DstNAT.IsValid():
		return []netlink.InetFamily{family(f.DstNAT.Is4())}
	case f.Family != "":
		return []netlink.InetFamily{family(f.Family == IPv4)}
	}
	return []netlink.InetFamily{unix.AF_INET, unix.AF_INET6}
}

func family(v4 bool) netlink.InetFamily {
	if v4 {
		return unix.AF_INET
	}
	return unix.AF_INET6
}
