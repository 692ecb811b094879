package socklb

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
)

// Fake is an in-memory socket LB: the maps, and the programs' decisions on
// them (Connect, SendMsg, RecvMsg, GetPeerName, in fakeprog.go), so callers' tests read as socket paths.
type Fake struct {
	mu       sync.Mutex
	services map[Service]fakeService
	ids      idAllocator // as Kernel numbers Services (ids.go)
	// revnat is the reverse-translation map, without the kernel's LRU
	// eviction: a Fake's entries stay.
	revnat map[fakeRevKey]netip.AddrPort
	// affinity is the ClientIP affinity map, without eviction either.
	affinity map[fakeAffKey]fakeAff
	// counts is the counts map: translations per service ID (counter.go).
	counts map[uint32]uint64
}

// fakeService is a services map element with its backends' slots.
type fakeService struct {
	id    uint32
	entry Entry
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake with empty maps.
func NewFake() *Fake {
	return &Fake{services: make(map[Service]fakeService), ids: newIDAllocator(),
		revnat: make(map[fakeRevKey]netip.AddrPort), affinity: make(map[fakeAffKey]fakeAff),
		counts: make(map[uint32]uint64)}
}

// SetService implements Interface.
func (f *Fake) SetService(_ context.Context, svc Service, e Entry) error {
	if err := validate(svc, &e); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ids.lookup(svc); !ok {
		f.counts[f.ids.take(svc)] = 0 // a new ID's counter starts at zero
	}
	s := fakeService{id: f.ids.take(svc)}
	s.entry = Entry{Backends: slices.Clone(e.Backends), AffinityTimeout: e.AffinityTimeout}
	f.services[svc] = s
	return nil
}

// DeleteService implements Interface.
func (f *Fake) DeleteService(_ context.Context, svc Service) error {
	if err := validate(svc, nil); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.services[svc]; ok {
		delete(f.counts, s.id)
	}
	delete(f.services, svc)
	f.ids.release(svc)
	return nil
}

// Services implements Interface.
func (f *Fake) Services(_ context.Context) (map[Service]Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[Service]Entry, len(f.services))
	for svc, s := range maps.All(f.services) {
		out[svc] = Entry{Backends: slices.Clone(s.entry.Backends), AffinityTimeout: s.entry.AffinityTimeout}
	}
	return out, nil
}

// Dump returns the Fake's maps decoded, as Kernel.Dump does the kernel's
// (Now is 0: the Fake's clock is its callers').
func (f *Fake) Dump(_ context.Context) (Dump, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var d Dump
	for svc, s := range f.services {
		d.Services = append(d.Services, DumpService{Service: svc, ID: s.id,
			Entry: Entry{Backends: slices.Clone(s.entry.Backends), AffinityTimeout: s.entry.AffinityTimeout}})
	}
	for k, a := range f.affinity {
		d.Affinity = append(d.Affinity, AffinityEntry{NetnsCookie: k.netnsCookie, ServiceID: k.id, Slot: a.slot, Backend: a.backend, LastUsed: a.lastUsed})
	}
	for k, vip := range f.revnat {
		d.RevNAT = append(d.RevNAT, RevNATEntry{SocketCookie: k.cookie, Backend: k.backend, Service: vip})
	}
	d.sort()
	return d, nil
}

// Load replaces the Fake's maps with d's, IDs and all: loaded with a
// Kernel's Dump, the Fake answers Connect as the kernel's programs would
// (give Client.Now on d.Now's clock for affinity).
func (f *Fake) Load(d Dump) error {
	services := make(map[Service]fakeService, len(d.Services))
	ids := newIDAllocator()
	for i, s := range d.Services {
		if err := validate(s.Service, &s.Entry); err != nil {
			return fmt.Errorf("dump: services[%d]: %w", i, err)
		}
		if err := ids.adopt(s.Service, s.ID); err != nil {
			return fmt.Errorf("dump: services[%d]: %w", i, err)
		}
		services[s.Service] = fakeService{id: s.ID, entry: Entry{Backends: slices.Clone(s.Backends), AffinityTimeout: s.AffinityTimeout}}
	}
	affinity := make(map[fakeAffKey]fakeAff, len(d.Affinity))
	for _, a := range d.Affinity {
		affinity[fakeAffKey{a.NetnsCookie, a.ServiceID}] = fakeAff{lastUsed: a.LastUsed, slot: a.Slot, backend: a.Backend}
	}
	revnat := make(map[fakeRevKey]netip.AddrPort, len(d.RevNAT))
	for _, r := range d.RevNAT {
		revnat[newFakeRevKey(r.SocketCookie, r.Backend)] = r.Service
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	counts := make(map[uint32]uint64, len(services))
	for _, s := range services {
		counts[s.id] = 0 // a Dump has no counts: the Fake counts from here
	}
	f.services, f.ids, f.affinity, f.revnat, f.counts = services, ids, affinity, revnat, counts
	return nil
}
