package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/kernel/link"
	"github.com/svcproxy/svcproxy/service"
)

// reconcile makes IPVS and the dummy interface match snap: the Syncer's
// Apply, so Sync runs it. It goes on after an error with one object and
// returns all of them joined. Real servers being drained are finished by a
// later sync: the Syncer resyncs every second while Draining is not zero.
func (d *Dataplane) reconcile(ctx context.Context, snap *service.Snapshot) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	w, errs := d.desired(snap)
	udp := staleSelection(w) // before syncVirtualServer consumes w's real servers
	dev := d.cfg.Interface
	if err := d.syncSysctls(ctx); err != nil {
		errs = append(errs, err)
	}
	// Masquerade before the virtual servers: a new service's first packets are
	// already marked.
	if err := d.syncMasq(ctx, w); err != nil {
		errs = append(errs, err)
	}

	if err := d.cfg.Links.EnsureDummy(ctx, dev); err != nil {
		return errors.Join(append(errs, err)...)
	}
	have, err := d.cfg.Links.Addresses(ctx, dev)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	// Addresses first, so a new virtual server takes traffic as soon as it exists.
	onDev := map[netip.Addr]bool{}
	for _, pfx := range have {
		onDev[pfx.Addr()] = true
	}
	for ip := range w.addrs {
		if !onDev[ip] {
			if err := d.cfg.Links.AddAddress(ctx, dev, hostPrefix(ip)); err != nil && !errors.Is(err, link.ErrExist) {
				errs = append(errs, err)
			}
		}
	}

	vss, err := d.cfg.IPVS.VirtualServers(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	current := map[kipvs.Key]kipvs.VirtualServer{}
	for _, vs := range vss {
		if d.cfg.Family.Has(vs.Key.Addr.Addr()) { // the other family's Dataplane keeps its own
			current[vs.Key] = vs
		}
	}
	for key, wvs := range w.vss {
		errs = append(errs, d.syncVirtualServer(ctx, wvs, current)...)
		delete(current, key)
	}
	// What is left is not wanted: if it is ours, it is retired: drained, then
	// deleted. Its address stays while it drains.
	retiring := map[netip.Addr]bool{}
	for key := range current {
		if !d.ours(key, onDev) {
			continue
		}
		gone, err := d.retire(ctx, key)
		if err != nil {
			errs = append(errs, err)
		}
		if !gone {
			retiring[key.Addr.Addr()] = true
		}
	}
	// The UDP entries this sync left stale go once the virtual servers are
	// as wanted: a client's next datagram finds the new ones.
	d.cleanConntrack(ctx, udp)
	// Addresses last, once no virtual server uses them.
	for _, pfx := range have {
		if d.mine(pfx) && !w.addrs[pfx.Addr()] && !retiring[pfx.Addr()] {
			if err := d.cfg.Links.DeleteAddress(ctx, dev, pfx); err != nil && !errors.Is(err, link.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// mine reports whether an address of the dummy interface is this Dataplane's to
// remove: a service address of its family (the kernel's own IPv6 link-local
// address is nobody's).
func (d *Dataplane) mine(pfx netip.Prefix) bool {
	return d.cfg.Family.Has(pfx.Addr()) && !pfx.Addr().IsLinkLocalUnicast()
}

// ours reports whether a virtual server is svcproxy's and of this Dataplane's
// family: its address is on the dummy interface, or it is a NodePort on a node
// address.
func (d *Dataplane) ours(k kipvs.Key, onDev map[netip.Addr]bool) bool {
	a := k.Addr.Addr()
	if !d.cfg.Family.Has(a) {
		return false
	}
	if onDev[a] {
		return true
	}
	port := k.Addr.Port()
	if port < d.cfg.NodePortRange[0] || port > d.cfg.NodePortRange[1] {
		return false
	}
	for _, ip := range d.cfg.NodePortIPs {
		if ip == a {
			return true
		}
	}
	return false
}

func (d *Dataplane) syncVirtualServer(ctx context.Context, w *wantedVS, current map[kipvs.Key]kipvs.VirtualServer) []error {
	ipvs := d.cfg.IPVS
	have, ok := current[w.vs.Key]
	switch {
	case !ok:
		if err := ipvs.AddVirtualServer(ctx, w.vs); err != nil && !errors.Is(err, kipvs.ErrExist) {
			return []error{fmt.Errorf("service port %s: %w", w.port, err)}
		}
	case have.Scheduler != w.vs.Scheduler || have.Persistent != w.vs.Persistent ||
		(w.vs.Persistent && have.Timeout != w.vs.Timeout):
		// The kernel swaps the scheduler in place; connections keep their real server.
		if err := ipvs.UpdateVirtualServer(ctx, w.vs); err != nil {
			return []error{fmt.Errorf("service port %s: %w", w.port, err)}
		}
	}
	reals, err := ipvs.RealServers(ctx, w.vs.Key)
	if err != nil {
		return []error{fmt.Errorf("service port %s: %w", w.port, err)}
	}
	var errs []error
	for _, rs := range reals {
		weight, wanted := w.reals[rs.Addr]
		delete(w.reals, rs.Addr) // what is left after the loop is missing
		var err error
		switch {
		case !wanted:
			err = d.drain(ctx, w.vs.Key, rs)
		case rs.Weight != weight:
			delete(d.draining, realKey{w.vs.Key, rs.Addr}) // back before it was gone
			err = ipvs.UpdateRealServer(ctx, w.vs.Key, kipvs.RealServer{Addr: rs.Addr, Weight: weight})
		default:
			delete(d.draining, realKey{w.vs.Key, rs.Addr})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("service port %s: %w", w.port, err))
		}
	}
	for addr, weight := range w.reals {
		err := ipvs.AddRealServer(ctx, w.vs.Key, kipvs.RealServer{Addr: addr, Weight: weight})
		if err != nil && !errors.Is(err, kipvs.ErrExist) {
			errs = append(errs, fmt.Errorf("service port %s: %w", w.port, err))
		}
	}
	return errs
}

// drain takes a real server that is no longer wanted out of service. TCP and SCTP:
// weight 0 first (no new connections), deleted once it has no connections left (as
// kube-proxy's graceful termination: active and inactive, since a half-closed
// connection still carries data) or GracePeriod after the drain began. UDP has no
// connection to finish: deleted at once.
func (d *Dataplane) drain(ctx context.Context, vs kipvs.Key, rs kipvs.RealServer) error {
	key := realKey{vs, rs.Addr}
	now := d.cfg.Now()
	start, draining := d.draining[key]
	if !draining {
		start = now
	}
	idle := rs.ActiveConns+rs.InactiveConns == 0
	if vs.Protocol == kipvs.UDP || idle || now.Sub(start) >= d.cfg.GracePeriod {
		delete(d.draining, key)
		err := d.cfg.IPVS.DeleteRealServer(ctx, vs, rs.Addr)
		if errors.Is(err, kipvs.ErrNotExist) {
			return nil
		}
		return err
	}
	d.draining[key] = start
	if rs.Weight == 0 {
		return nil
	}
	return d.cfg.IPVS.UpdateRealServer(ctx, vs, kipvs.RealServer{Addr: rs.Addr, Weight: 0})
}

// retire takes a virtual server that is no longer wanted (its Service was
// deleted, or hybrid mode demoted its port) out of service without cutting its
// connections: each real server drains as a removed endpoint does (weight 0,
// deleted once idle or after GracePeriod; UDP at once), and the virtual server
// goes with its last real server. Deleting it at once would, with
// expire_nodest_conn=1, drop every connection it carries. While it drains, a
// new connection finds no real server to take it (IPVS answers with ICMP
// port unreachable), unless a portal or another path catches it first (hybrid
// adds the portal before it lets the port go). It reports whether the virtual
// server is gone.
func (d *Dataplane) retire(ctx context.Context, vs kipvs.Key) (bool, error) {
	reals, err := d.cfg.IPVS.RealServers(ctx, vs)
	if errors.Is(err, kipvs.ErrNotExist) {
		d.forgetDrains(vs)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("retiring virtual server %s: %w", vs.Addr, err)
	}
	var errs []error
	for _, rs := range reals {
		if err := d.drain(ctx, vs, rs); err != nil {
			errs = append(errs, fmt.Errorf("retiring virtual server %s: %w", vs.Addr, err))
		}
	}
	for k := range d.draining {
		if k.vs == vs {
			return false, errors.Join(errs...) // still draining
		}
	}
	if len(errs) > 0 {
		return false, errors.Join(errs...)
	}
	if err := d.cfg.IPVS.DeleteVirtualServer(ctx, vs); err != nil && !errors.Is(err, kipvs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

func (d *Dataplane) forgetDrains(vs kipvs.Key) {
	for k := range d.draining {
		if k.vs == vs {
			delete(d.draining, k)
		}
	}
}

// connections returns, per service port this Dataplane carries, the
// connections its virtual servers have accepted (one per service address, one
// per node address for a NodePort): what hybrid mode's promoter watches once a
// port is in the kernel. The keys come from the same desired state reconcile
// applies.
func (d *Dataplane) connections(ctx context.Context, snap *service.Snapshot) (map[service.PortName]uint64, error) {
	vss, err := d.cfg.IPVS.VirtualServers(ctx)
	if err != nil {
		return nil, err
	}
	conns := make(map[kipvs.Key]uint32, len(vss))
	for _, vs := range vss {
		conns[vs.Key] = vs.Stats.Connections
	}
	w, _ := d.desired(snap) // annotation errors are Sync's to report
	out := make(map[service.PortName]uint64)
	for key, wvs := range w.vss {
		out[wvs.port] += uint64(conns[key])
	}
	return out, nil
}

// Draining is the number of real servers waiting at weight 0 for their connections
// to end.
func (d *Dataplane) Draining() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.draining)
}

// Cleanup removes what svcproxy made in IPVS mode in the Dataplane's family: its
// virtual servers, its service IPs on the dummy interface, and its masquerade
// rules and ip sets; the dummy interface goes with the last service IP of
// either family (svcproxy --cleanup runs it for both families, in any order).
// Nothing there is no error. Sysctls are left as they are.
func (d *Dataplane) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	onDev := map[netip.Addr]bool{}
	have, err := d.cfg.Links.Addresses(ctx, d.cfg.Interface)
	if err != nil && !errors.Is(err, link.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, pfx := range have {
		onDev[pfx.Addr()] = true
	}
	vss, err := d.cfg.IPVS.VirtualServers(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, vs := range vss {
		if d.ours(vs.Key, onDev) {
			if err := d.cfg.IPVS.DeleteVirtualServer(ctx, vs.Key); err != nil && !errors.Is(err, kipvs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	clear(d.draining)
	others := false // service IPs of the other family: its Cleanup deletes the link
	for _, pfx := range have {
		switch {
		case d.mine(pfx):
			if err := d.cfg.Links.DeleteAddress(ctx, d.cfg.Interface, pfx); err != nil && !errors.Is(err, link.ErrNotExist) {
				errs = append(errs, err)
			}
		case !pfx.Addr().IsLinkLocalUnicast():
			others = true
		}
	}
	if !others {
		if err := d.cfg.Links.DeleteLink(ctx, d.cfg.Interface); err != nil && !errors.Is(err, link.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := d.cleanupMasq(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
