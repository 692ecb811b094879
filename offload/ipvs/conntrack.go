package ipvs

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
)

// ConntrackStats counts the conntrack cleanup of UDP entries after the syncs
// (cleanConntrack): /status shows them under "conntrack".
type ConntrackStats struct {
	// Deleted is the number of entries deleted since the process started.
	Deleted uint64 `json:"deleted"`
	// Errors is the number of syncs whose cleanup failed, LastError the
	// latest failure's error ("" once a cleanup succeeds again).
	Errors    uint64 `json:"errors"`
	LastError string `json:"lastError,omitempty"`
}

// staleSelection is what a sync of w serves over UDP, as the conntrack table
// sees it: each UDP frontend of a virtual server (a ClusterIP, external or
// LoadBalancer IP with the Service's port, a node address with the NodePort)
// and the addresses of its real servers, sorted. It is taken before
// syncVirtualServer consumes w's real servers. A frontend without real
// servers is there with none: every entry to it goes, those a one-way sender
// keeps alive to the real server it had last among them (kubernetes#139629;
// IPVS frontends name their address, so a node port's are no exception).
func staleSelection(w wanted) conntrack.Stale {
	s := conntrack.Stale{Family: conntrack.Family(w.family), Frontends: map[netip.AddrPort][]netip.Addr{}}
	for key, wvs := range w.vss {
		if key.Protocol != kipvs.UDP {
			continue
		}
		eps := make([]netip.Addr, 0, len(wvs.reals))
		for rs := range wvs.reals {
			eps = append(eps, rs.Addr())
		}
		slices.SortFunc(eps, netip.Addr.Compare)
		s.Frontends[key.Addr] = slices.Compact(eps)
	}
	return s
}

// cleanConntrack deletes the UDP conntrack entries that the sync which
// served s left stale, as kube-proxy's IPVS mode does
// (pkg/proxy/conntrack/cleanup.go): a UDP client keeps sending into its
// entry, which no longer leads anywhere useful, until it is deleted (TCP
// clients notice a dead peer and reconnect). IPVS rewrites the entry's reply
// to come from the real server it picked (net.ipv4.vs.conntrack=1), so an
// entry is stale when its frontend is not served any more, or when its reply
// comes from an address that is not one of its frontend's real servers.
//
//   - every UDP entry of a frontend that left the selection since the last
//     sync (its Service deleted, its port demoted), by filter;
//   - when the selection changed since the last reconcile (a frontend joined
//     it, or its real servers changed), the last walk failed, or this is the
//     process's first sync: one walk of the family's
//     table (DeleteStale) for the entries of served frontends whose reply does
//     not come from one of their real servers. That covers what happened
//     before this process (a userspace mode's REDIRECTed flows, a real server
//     removed while no proxy ran), a removed real server, the last one
//     included (every entry of its frontend goes), and a frontend that got
//     its first real server (its entries were never NATed).
//
// Errors are counted in the stats and logged (Config.Logger), not returned: the sync itself
// succeeded. A frontend whose entries could not be deleted stays in the
// served selection, so the next sync tries again.
func (d *Dataplane) cleanConntrack(ctx context.Context, s conntrack.Stale) {
	if d.cfg.Conntrack == nil {
		return
	}
	start := d.cfg.Now()
	defer func() { d.conntrackDuration.Observe(d.cfg.Now().Sub(start).Seconds()) }()
	served := maps.Clone(s.Frontends)
	deleted := 0
	var errs []error
	for fe, eps := range d.served {
		if _, ok := s.Frontends[fe]; ok {
			continue
		}
		n, err := d.cfg.Conntrack.Delete(ctx, conntrack.Filter{Protocol: "udp", OrigDst: fe.Addr(), OrigDstPort: fe.Port()})
		deleted += n
		if err != nil {
			errs = append(errs, err)
			served[fe] = eps // again at the next sync
		}
	}
	if !d.reconciled || grew(d.served, s.Frontends) {
		d.reconciled = true
		if len(s.Frontends) > 0 {
			n, err := d.cfg.Conntrack.DeleteStale(ctx, s)
			deleted += n
			if err != nil {
				errs = append(errs, err)
				d.reconciled = false
			}
		}
	}
	d.served = served
	d.ctStats.Deleted += uint64(deleted)
	if err := errors.Join(errs...); err != nil {
		d.ctStats.Errors++
		d.ctStats.LastError = err.Error()
		if d.cfg.Logger != nil {
			d.cfg.Logger.Warn("conntrack cleanup failed; the next sync tries again", "err", err)
		}
	} else {
		d.ctStats.LastError = ""
	}
}

// Conntrack returns the counts of the conntrack cleanup so far.
func (d *Dataplane) Conntrack() ConntrackStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctStats
}

// grew reports whether cur has a frontend that old has not, or with other
// real servers: what can make entries stale that the walk must find. A
// frontend that only left is deleted by filter.
func grew(old, cur map[netip.AddrPort][]netip.Addr) bool {
	for fe, eps := range cur {
		if was, ok := old[fe]; !ok || !slices.Equal(was, eps) {
			return true
		}
	}
	return false
}
