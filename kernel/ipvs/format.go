package ipvs

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
)

// List reads every virtual server and its real servers and formats them (Format).
func List(ctx context.Context, ipvs Interface) (string, error) {
	vss, err := ipvs.VirtualServers(ctx)
	if err != nil {
		return "", err
	}
	reals := make(map[Key][]RealServer, len(vss))
	for _, vs := range vss {
		rss, err := ipvs.RealServers(ctx, vs.Key)
		if err != nil {
			return "", err
		}
		reals[vs.Key] = rss
	}
	return Format(vss, reals), nil
}

// Format prints virtual and real servers the way ipvsadm -ln does, sorted, so people
// following the labs recognise it:
//
//	Prot LocalAddress:Port Scheduler Flags
//	  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
//	TCP  198.18.0.10:80 rr persistent 10800
//	  -> 198.19.1.2:8080              Masq    1      0          0
func Format(vss []VirtualServer, reals map[Key][]RealServer) string {
	var b strings.Builder
	b.WriteString("Prot LocalAddress:Port Scheduler Flags\n")
	b.WriteString("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n")
	vss = slices.Clone(vss)
	slices.SortFunc(vss, func(a, b VirtualServer) int { return compareKeys(a.Key, b.Key) })
	for _, vs := range vss {
		fmt.Fprintf(&b, "%-4s %s %s", vs.Protocol, vs.Addr, vs.Scheduler)
		if vs.Persistent {
			fmt.Fprintf(&b, " persistent %d", int(vs.Timeout.Seconds()))
		}
		b.WriteByte('\n')
		rss := slices.Clone(reals[vs.Key])
		slices.SortFunc(rss, func(a, b RealServer) int { return a.Addr.Compare(b.Addr) })
		for _, rs := range rss {
			fmt.Fprintf(&b, "  -> %-28s Masq    %-6d %-10d %d\n", rs.Addr, rs.Weight, rs.ActiveConns, rs.InactiveConns)
		}
	}
	return b.String()
}

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), a.Addr.Compare(b.Addr))
}
