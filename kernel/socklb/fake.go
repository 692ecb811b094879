package socklb

import (
	"context"
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
	nextID   uint32
	// revnat is the reverse-translation map, without the kernel's LRU
	// eviction: a Fake's entries stay.
	revnat map[fakeRevKey]netip.AddrPort
	// affinity is the ClientIP affinity map, without eviction either.
	affinity map[fakeAffKey]fakeAff
}

// fakeService is a services map element with its backends' slots.
type fakeService struct {
	id    uint32
	entry Entry
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake with empty maps.
func NewFake() *Fake {
	return &Fake{services: make(map[Service]fakeService), nextID: 1,
		revnat: make(map[fakeRevKey]netip.AddrPort), affinity: make(map[fakeAffKey]fakeAff)}
}

// SetService implements Interface.
func (f *Fake) SetService(_ context.Context, svc Service, e Entry) error {
	if err := validate(svc, &e); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.services[svc]
	if !ok {
		s.id = f.nextID
		f.nextID++
	}
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
	delete(f.services, svc)
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
