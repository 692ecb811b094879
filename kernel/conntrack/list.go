package conntrack

import (
	"net/netip"
	"strconv"
	"strings"
)

// Entry is one entry of the table as conntrack(8) lists it (`conntrack -L`):
// the connection as its first packet was sent (Orig) and the reply the
// kernel expects (Reply), each a source and a destination. Where Orig's
// destination and Reply's source differ, the kernel rewrote the destination
// (DNAT, REDIRECT); where Orig's source and Reply's destination differ, the
// source (MASQUERADE).
type Entry struct {
	Protocol    string // tcp, udp
	Timeout     int    // seconds left
	State       string // TCP's state ("TIME_WAIT"); "" for UDP
	Orig, Reply [2]netip.AddrPort
	Assured     bool
}

// ParseList reads `conntrack -L` output, the TCP and UDP entries; other
// protocols' and the tool's summary line are left out. A line reads
//
//	tcp 6 119 TIME_WAIT src=A dst=B sport=1 dport=2 src=B' dst=A' sport=2' dport=1' [ASSURED] mark=0 use=1
func ParseList(out string) []Entry {
	var entries []Entry
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[0] != "tcp" && f[0] != "udp") {
			continue
		}
		e := Entry{Protocol: f[0]}
		e.Timeout, _ = strconv.Atoi(f[2])
		var addrs []string
		var ports []string
		for _, w := range f[3:] {
			k, v, ok := strings.Cut(w, "=")
			switch {
			case !ok && !strings.HasPrefix(w, "["):
				e.State = w
			case w == "[ASSURED]":
				e.Assured = true
			case k == "src" || k == "dst":
				addrs = append(addrs, v)
			case k == "sport" || k == "dport":
				ports = append(ports, v)
			}
		}
		if len(addrs) != 4 || len(ports) != 4 {
			continue
		}
		ap := func(i int) netip.AddrPort {
			a, _ := netip.ParseAddr(addrs[i])
			p, _ := strconv.ParseUint(ports[i], 10, 16)
			return netip.AddrPortFrom(a, uint16(p))
		}
		e.Orig = [2]netip.AddrPort{ap(0), ap(1)}
		e.Reply = [2]netip.AddrPort{ap(2), ap(3)}
		entries = append(entries, e)
	}
	return entries
}
