package socklb

import "fmt"

// idAllocator numbers Services: a Service's ID is the first half of its
// backends' keys (backendKey) and of its clients' affinity entries (affKey).
// Kernel and Fake share it, so both hand out the same IDs for the same calls
// and a Fake loaded with a Kernel's Dump goes on as the Kernel would.
//
// IDs are handed out in order, skipping the ones still held, and come round
// again only when the u32 counter wraps; a deleted Service's ID is not
// reused at once. The programs read a Service in two steps: its services
// element (ID and count), then a backend slot by (ID, slot). A connect()
// that read the element of a Service deleted just after could otherwise,
// between the two reads, find the slots of a new Service that took the same
// ID, and send its client to a backend of another Service; in order, that
// takes some four billion new Services in between. Cilium allocates its
// service IDs the same way (idAllocator.acquireLocalID,
// pkg/loadbalancer/reconciler/id_allocator.go).
//
// Both directions are kept as maps, so take, lookup and release are O(1),
// and the search for a free ID only moves forward: every ID it passes is
// one a Service holds, so n takes cost O(n) in all (amortized O(1)). (An
// earlier version built the set of held IDs anew for every new Service,
// which made the first sync of n Services O(n²): 10,000 Services took
// seconds.)
type idAllocator struct {
	byService map[Service]uint32
	owner     map[uint32]Service
	next      uint32 // where the search for a free ID starts; 0 is never one
}

func newIDAllocator() idAllocator {
	return idAllocator{byService: make(map[Service]uint32), owner: make(map[uint32]Service), next: 1}
}

// lookup returns svc's ID, if it has one.
func (a *idAllocator) lookup(svc Service) (uint32, bool) {
	id, ok := a.byService[svc]
	return id, ok
}

// take gives svc an ID no other Service holds and returns it. A Service that
// has one keeps it. The services map holds at most MaxServices (a u32)
// elements, fewer than the 2³²-1 IDs, so the search ends.
func (a *idAllocator) take(svc Service) uint32 {
	if id, ok := a.byService[svc]; ok {
		return id
	}
	for {
		id := a.next
		a.next++ // wraps to 0 after 2³²-1, skipped next time round
		if _, held := a.owner[id]; id != 0 && !held {
			a.byService[svc], a.owner[id] = id, svc
			return id
		}
	}
}

// release frees svc's ID, if it has one.
func (a *idAllocator) release(svc Service) {
	if id, ok := a.byService[svc]; ok {
		delete(a.byService, svc)
		delete(a.owner, id)
	}
}

// adopt records that svc holds id, as found in maps filled by someone else
// (a previous Kernel's pinned maps, a Dump), and moves the search past it:
// new Services then continue after the highest adopted ID, as the previous
// owner of the maps would have, rather than reuse an ID it freed just before.
func (a *idAllocator) adopt(svc Service, id uint32) error {
	if id == 0 {
		return fmt.Errorf("service %s: id: must not be 0", svc)
	}
	if other, held := a.owner[id]; held && other != svc {
		return fmt.Errorf("service %s: id %d: also %s's", svc, id, other)
	}
	if old, ok := a.byService[svc]; ok && old != id {
		return fmt.Errorf("service %s: id %d: it already has id %d", svc, id, old)
	}
	a.byService[svc], a.owner[id] = id, svc
	if id >= a.next {
		a.next = id + 1
	}
	return nil
}
