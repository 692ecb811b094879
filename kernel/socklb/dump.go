package socklb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Dump is the four maps decoded: what `svclab rules` prints, and what a Fake
// can be loaded with (Fake.Load) to walk a connect() through the programs
// over the kernel's own maps (`svclab trace`).
type Dump struct {
	Services []DumpService
	Affinity []AffinityEntry
	RevNAT   []RevNATEntry

	// Now is bpf_ktime_get_ns's clock (CLOCK_MONOTONIC) when the Kernel was
	// read, to tell an affinity entry's age; 0 from a Fake.
	Now time.Duration
}

// DumpService is a services map element with its backends.
type DumpService struct {
	Service
	ID uint32 // the first half of its backends' keys
	Entry
}

// AffinityEntry is an affinity map element: the backend a network namespace
// reached last through a Service, and when.
type AffinityEntry struct {
	NetnsCookie uint64
	ServiceID   uint32
	Slot        uint32
	Backend     netip.AddrPort
	LastUsed    time.Duration // bpf_ktime_get_ns
}

// RevNATEntry is a revnat map element: a socket that reached Backend through
// Service.
type RevNATEntry struct {
	SocketCookie uint64
	Backend      netip.AddrPort
	Service      netip.AddrPort
}

// String prints the maps as a person reads them, one element a line.
func (d Dump) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "services: (VIP, port, protocol) -> id, affinity, backends by slot\n")
	for _, s := range d.Services {
		aff := "none"
		if s.AffinityTimeout > 0 {
			aff = s.AffinityTimeout.String()
		}
		fmt.Fprintf(&b, "  %-28s id %-4d affinity %-8s", s.Service, s.ID, aff)
		if len(s.Backends) == 0 {
			b.WriteString("  no endpoint: untouched")
		}
		for slot, be := range s.Backends {
			fmt.Fprintf(&b, "  [%d] %s", slot, be)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "affinity: (netns cookie, id) -> slot, backend, last used\n")
	for _, a := range d.Affinity {
		fmt.Fprintf(&b, "  (%d, %d)  slot %d %s, used at %s", a.NetnsCookie, a.ServiceID, a.Slot, a.Backend, a.LastUsed)
		if d.Now > 0 {
			fmt.Fprintf(&b, " (%s ago)", (d.Now - a.LastUsed).Truncate(time.Second))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "revnat: (socket cookie, backend) -> Service\n")
	for _, r := range d.RevNAT {
		fmt.Fprintf(&b, "  (%d, %s)  %s\n", r.SocketCookie, r.Backend, r.Service)
	}
	return b.String()
}

// sort orders each list by its key.
func (d *Dump) sort() {
	slices.SortFunc(d.Services, func(a, b DumpService) int {
		return cmp.Or(a.VIP.Compare(b.VIP), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol))
	})
	slices.SortFunc(d.Affinity, func(a, b AffinityEntry) int {
		return cmp.Or(cmp.Compare(a.NetnsCookie, b.NetnsCookie), cmp.Compare(a.ServiceID, b.ServiceID))
	})
	slices.SortFunc(d.RevNAT, func(a, b RevNATEntry) int {
		return cmp.Or(cmp.Compare(a.SocketCookie, b.SocketCookie), a.Backend.Compare(b.Backend))
	})
}

// Dump implements reading the maps back for Kernel.
func (k *Kernel) Dump(_ context.Context) (Dump, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return dumpMaps(&k.m)
}

// dumpMaps reads the four maps. The LRU maps change under the read (the
// programs write them): an element may be missed or seen twice, which a
// listing for a person can bear.
func dumpMaps(m *bpfMaps) (Dump, error) {
	var d Dump
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err == nil {
		d.Now = time.Duration(ts.Nano())
	}
	var sk svcKey
	var sv svcValue
	it := m.services.Iterate()
	for it.Next(&sk, &sv) {
		s := DumpService{Service: decodeSvcKey(sk), ID: sv.ID, Entry: Entry{AffinityTimeout: sv.affinity()}}
		for slot := range sv.Count {
			var bv backendValue
			if err := m.backends.Lookup(&backendKey{ID: sv.ID, Slot: slot}, &bv); err != nil {
				return Dump{}, fmt.Errorf("service %s: slot %d: read backends map: %w", s.Service, slot, err)
			}
			s.Backends = append(s.Backends, decodeBackend(bv))
		}
		d.Services = append(d.Services, s)
	}
	var ak affKey
	var av affValue
	ait := m.affinity.Iterate()
	for ait.Next(&ak, &av) {
		d.Affinity = append(d.Affinity, AffinityEntry{
			NetnsCookie: ak.NetnsCookie, ServiceID: ak.ID, Slot: av.Slot, LastUsed: time.Duration(av.LastUsed),
			Backend: decodeBackend(backendValue{Addr: av.Addr, Port: av.Port}),
		})
	}
	var rk revKey
	var rv revValue
	rit := m.revnat.Iterate()
	for rit.Next(&rk, &rv) {
		d.RevNAT = append(d.RevNAT, RevNATEntry{
			SocketCookie: rk.Cookie, Service: decodeBackend(rv),
			Backend: decodeBackend(backendValue{Addr: rk.Addr, Port: rk.Port}),
		})
	}
	if err := errors.Join(it.Err(), ait.Err(), rit.Err()); err != nil {
		return Dump{}, fmt.Errorf("socklb: read maps: %w", err)
	}
	d.sort()
	return d, nil
}

// Pinned is the maps a Kernel pinned, opened read-only by another process
// (svclab) to look at them: no program is loaded, nothing can be changed.
type Pinned struct {
	m bpfMaps
}

// OpenPinned opens the maps pinned in pinPath (a Kernel's Config.PinPath)
// read-only.
func OpenPinned(pinPath string) (_ *Pinned, err error) {
	p := &Pinned{}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	svcSpec, beSpec, revSpec, affSpec := mapSpecs(1)
	for _, m := range []struct {
		name string
		to   **ebpf.Map
	}{{svcSpec.Name, &p.m.services}, {beSpec.Name, &p.m.backends}, {revSpec.Name, &p.m.revnat}, {affSpec.Name, &p.m.affinity}, {countsSpec(1).Name, &p.m.counts}} {
		path := filepath.Join(pinPath, m.name)
		if *m.to, err = ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true}); err != nil {
			return nil, fmt.Errorf("socklb: open pinned map %s: %w", path, err)
		}
	}
	return p, nil
}

// Dump reads the pinned maps.
func (p *Pinned) Dump(_ context.Context) (Dump, error) { return dumpMaps(&p.m) }

// Connections returns how many connect()s (and unconnected UDP datagrams)
// the programs translated for each Service, from the pinned counts map, as
// Kernel.Connections does from its own: what `svclab web` shows as the
// kernel's count in socklb mode.
func (p *Pinned) Connections(ctx context.Context) (map[Service]uint64, error) {
	d, err := p.Dump(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[Service]uint64, len(d.Services))
	var perCPU []uint64
	for _, s := range d.Services {
		err := p.m.counts.Lookup(&s.ID, &perCPU)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			out[s.Service] = 0
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("socklb: service %s: id %d: read the counts map: %w", s.Service, s.ID, err)
		}
		var sum uint64
		for _, n := range perCPU {
			sum += n
		}
		out[s.Service] = sum
	}
	return out, nil
}

// Close closes the maps (the pins stay).
func (p *Pinned) Close() error { return p.m.close() }
