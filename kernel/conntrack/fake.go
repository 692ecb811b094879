package conntrack

import (
	"context"
	"net/netip"
	"slices"
	"sync"
)

// Flow is one conntrack entry as the Fake keeps it.
type Flow struct {
	Protocol string
	Src      netip.AddrPort // the client
	OrigDst  netip.AddrPort // where it sent: the VIP or node port
	DstNAT   netip.AddrPort // where it went: the endpoint (OrigDst if not NATed)
}

// matches reports whether f selects the flow.
func (f Filter) matches(fl Flow) bool {
	if f.Family != "" && fl.OrigDst.Addr().Is4() != (f.Family == IPv4) {
		return false
	}
	return f.Protocol == fl.Protocol &&
		(!f.OrigDst.IsValid() || f.OrigDst == fl.OrigDst.Addr()) &&
		(f.OrigDstPort == 0 || f.OrigDstPort == fl.OrigDst.Port()) &&
		(!f.DstNAT.IsValid() || f.DstNAT == fl.DstNAT.Addr())
}

// Fake is an in-memory conntrack table. It records every Delete call.
type Fake struct {
	mu      sync.Mutex
	flows   []Flow
	deletes []Filter
	stales  []Stale
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake holding flows.
func NewFake(flows ...Flow) *Fake { return &Fake{flows: slices.Clone(flows)} }

// Add adds flows.
func (f *Fake) Add(flows ...Flow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flows = append(f.flows, flows...)
}

// Flows returns the flows left.
func (f *Fake) Flows() []Flow {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.flows)
}

// Deletes returns the filters of every Delete call so far, in order.
func (f *Fake) Deletes() []Filter {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deletes)
}

// Delete implements Interface.
func (f *Fake) Delete(ctx context.Context, flt Filter) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := flt.validate(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes = append(f.deletes, flt)
	before := len(f.flows)
	f.flows = slices.DeleteFunc(f.flows, flt.matches)
	return before - len(f.flows), nil
}

// Stales returns the selections of every DeleteStale call so far, in order.
func (f *Fake) Stales() []Stale {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.stales)
}

// DeleteStale implements Interface.
func (f *Fake) DeleteStale(ctx context.Context, s Stale) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := s.validate(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stales = append(f.stales, s)
	before := len(f.flows)
	f.flows = slices.DeleteFunc(f.flows, func(fl Flow) bool {
		return fl.Protocol == "udp" && s.matches(fl.OrigDst, fl.DstNAT.Addr())
	})
	return before - len(f.flows), nil
}
