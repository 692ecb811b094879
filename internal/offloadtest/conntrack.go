package offloadtest

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// UDPEntry is one UDP entry of a conntrack table: what the client sent
// (Src to Dst, a Service's address when DNATed) and where the kernel
// expects the reply from (ReplySrc, the backend it chose).
type UDPEntry struct {
	Src, Dst netip.AddrPort
	ReplySrc netip.Addr
}

// UDPEntries lists the IPv4 UDP entries of the conntrack table of the
// network namespace the calling thread is in: call it from inside the
// namespace (netnstest.NS.Do). It reads the table over netlink, as
// conntrack -L does, so a test needs no conntrack tool, which the IPVS
// VM's guest does not have.
func UDPEntries() ([]UDPEntry, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("conntrack: %w", err)
	}
	defer h.Close()
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("conntrack: list: %w", err)
	}
	var out []UDPEntry
	for _, f := range flows {
		if f.Forward.Protocol != unix.IPPROTO_UDP {
			continue
		}
		src, _ := netip.AddrFromSlice(f.Forward.SrcIP)
		dst, _ := netip.AddrFromSlice(f.Forward.DstIP)
		reply, _ := netip.AddrFromSlice(f.Reverse.SrcIP)
		out = append(out, UDPEntry{
			Src:      netip.AddrPortFrom(src.Unmap(), f.Forward.SrcPort),
			Dst:      netip.AddrPortFrom(dst.Unmap(), f.Forward.DstPort),
			ReplySrc: reply.Unmap(),
		})
	}
	return out, nil
}
