package ipvs

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
)

// Fake is an in-memory IPVS that keeps state like the kernel does and refuses what
// the kernel refuses (duplicates, missing objects, bad schedulers, weights, families).
// Tests set connection counts with SetConns and read everything back with Dump.
type Fake struct {
	mu       sync.Mutex
	vss      map[Key]*fakeVS
	timeouts Timeouts
	writes   int
}

type fakeVS struct {
	vs    VirtualServer
	reals map[netip.AddrPort]RealServer
}

var _ Interface = (*Fake)(nil)

// NewFake returns an empty Fake with the kernel's default timeouts
// (ip_vs_proto_tcp.c: 15 min established, 2 min FIN_WAIT; ip_vs_proto_udp.c: 5 min).
func NewFake() *Fake {
	return &Fake{
		vss:      map[Key]*fakeVS{},
		timeouts: Timeouts{TCP: 900e9, TCPFin: 120e9, UDP: 300e9},
	}
}

// Writes counts the calls that changed state: a second reconcile of the same
// input should add none.
func (f *Fake) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// SetStats sets the counters of a virtual server, as traffic would.
func (f *Fake) SetStats(k Key, st Stats) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vss[k]
	if !ok {
		return fmt.Errorf("fake ipvs: virtual server %s: %w", k, ErrNotExist)
	}
	v.vs.Stats = st
	return nil
}

// SetConns sets the connection counters of a real server, as traffic would.
func (f *Fake) SetConns(k Key, addr netip.AddrPort, active, inactive int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vss[k]
	if !ok {
		return fmt.Errorf("fake ipvs: virtual server %s: %w", k, ErrNotExist)
	}
	rs, ok := v.reals[addr]
	if !ok {
		return fmt.Errorf("fake ipvs: real server %s of %s: %w", addr, k, ErrNotExist)
	}
	rs.ActiveConns, rs.InactiveConns = active, inactive
	v.reals[addr] = rs
	return nil
}

// Dump lists the state in the shape of ipvsadm -ln (see Format).
func (f *Fake) Dump() string {
	s, err := List(context.Background(), f)
	if err != nil {
		return "error: " + err.Error()
	}
	return s
}

// VirtualServers implements Interface.
func (f *Fake) VirtualServers(ctx context.Context) ([]VirtualServer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]VirtualServer, 0, len(f.vss))
	for _, v := range f.vss {
		out = append(out, v.vs)
	}
	return out, ctx.Err()
}

// AddVirtualServer implements Interface.
func (f *Fake) AddVirtualServer(ctx context.Context, vs VirtualServer) error {
	if err := vs.validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vss[vs.Key]; ok {
		return fmt.Errorf("fake ipvs: add virtual server %s: %w", vs.Key, ErrExist)
	}
	vs.Stats = Stats{}
	f.vss[vs.Key] = &fakeVS{vs: vs, reals: map[netip.AddrPort]RealServer{}}
	f.writes++
	return nil
}

// UpdateVirtualServer implements Interface.
func (f *Fake) UpdateVirtualServer(ctx context.Context, vs VirtualServer) error {
	if err := vs.validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vss[vs.Key]
	if !ok {
		return fmt.Errorf("fake ipvs: update virtual server %s: %w", vs.Key, ErrNotExist)
	}
	vs.Stats = v.vs.Stats
	v.vs = vs
	f.writes++
	return nil
}

// DeleteVirtualServer implements Interface.
func (f *Fake) DeleteVirtualServer(ctx context.Context, k Key) error {
	if err := k.validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vss[k]; !ok {
		return fmt.Errorf("fake ipvs: delete virtual server %s: %w", k, ErrNotExist)
	}
	delete(f.vss, k)
	f.writes++
	return nil
}

// RealServers implements Interface.
func (f *Fake) RealServers(ctx context.Context, k Key) ([]RealServer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := f.lookup("list real servers of", k)
	if err != nil {
		return nil, err
	}
	out := make([]RealServer, 0, len(v.reals))
	for _, rs := range v.reals {
		out = append(out, rs)
	}
	return out, ctx.Err()
}

// AddRealServer implements Interface.
func (f *Fake) AddRealServer(ctx context.Context, k Key, rs RealServer) error {
	if err := rs.validate(k); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := f.lookup("add real server to", k)
	if err != nil {
		return err
	}
	if _, ok := v.reals[rs.Addr]; ok {
		return fmt.Errorf("fake ipvs: add real server %s of %s: %w", rs.Addr, k, ErrExist)
	}
	v.reals[rs.Addr] = RealServer{Addr: rs.Addr, Weight: rs.Weight}
	f.writes++
	return nil
}

// UpdateRealServer implements Interface.
func (f *Fake) UpdateRealServer(ctx context.Context, k Key, rs RealServer) error {
	if err := rs.validate(k); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := f.lookup("update real server of", k)
	if err != nil {
		return err
	}
	old, ok := v.reals[rs.Addr]
	if !ok {
		return fmt.Errorf("fake ipvs: update real server %s of %s: %w", rs.Addr, k, ErrNotExist)
	}
	old.Weight = rs.Weight
	v.reals[rs.Addr] = old
	f.writes++
	return nil
}

// DeleteRealServer implements Interface.
func (f *Fake) DeleteRealServer(ctx context.Context, k Key, addr netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := f.lookup("delete real server of", k)
	if err != nil {
		return err
	}
	if _, ok := v.reals[addr]; !ok {
		return fmt.Errorf("fake ipvs: delete real server %s of %s: %w", addr, k, ErrNotExist)
	}
	delete(v.reals, addr)
	f.writes++
	return nil
}

// Timeouts implements Interface.
func (f *Fake) Timeouts(ctx context.Context) (Timeouts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.timeouts, ctx.Err()
}

// SetTimeouts implements Interface.
func (f *Fake) SetTimeouts(ctx context.Context, t Timeouts) error {
	if t.TCP < 0 || t.TCPFin < 0 || t.UDP < 0 {
		return fmt.Errorf("fake ipvs: set timeouts %+v: negative timeout", t)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.TCP != 0 {
		f.timeouts.TCP = t.TCP
	}
	if t.TCPFin != 0 {
		f.timeouts.TCPFin = t.TCPFin
	}
	if t.UDP != 0 {
		f.timeouts.UDP = t.UDP
	}
	f.writes++
	return nil
}

func (f *Fake) lookup(what string, k Key) (*fakeVS, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	v, ok := f.vss[k]
	if !ok {
		return nil, fmt.Errorf("fake ipvs: %s %s: %w", what, k, ErrNotExist)
	}
	return v, nil
}
