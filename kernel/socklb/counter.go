package socklb

import (
	"context"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// The connection counter: how many connect()s (and datagrams of unconnected
// UDP sockets, sendmsg()) the forward programs translated, per Service. A
// socket whose destination the hook rewrote never passes a portal nor a DNAT
// rule, so nothing else on the node counts it; hybrid mode reads these
// counters to see that a port promoted to the socket LB went quiet, and
// demotes it (package hybrid, offload/socklb's Counter).
//
// The counts map is a per-CPU hash, service ID -> u64: each CPU adds to its
// own copy of the value, so connect()s on different CPUs never contend for
// a cache line, and a reader sums the copies (Cilium's cilium_metrics map is
// per-CPU for the same reason). It is keyed by ID, not by (VIP, port,
// protocol), so the program needs no second key: the ID is in the services
// map's value it has already found. SetService creates a Service's element,
// at zero, when the Service gets its ID, and DeleteService deletes it, so an
// ID reused by another Service starts from zero. It is pinned with the other
// maps: a restart keeps counting, and hybrid's rates see no jump.

// countsSpec is the counts map's spec, one element per Service.
func countsSpec(maxServices uint32) *ebpf.MapSpec {
	return &ebpf.MapSpec{
		Name: "svcp_counts", Type: ebpf.PerCPUHash,
		KeySize: 4, ValueSize: 8, MaxEntries: maxServices,
	}
}

// stCountKey is the counts map's key on the stack: the Service's ID, 4 bytes
// below everything else the forward programs keep there (program.go).
const stCountKey = -148

// countTranslation adds 1 to the Service's counter, after the rewrite (R7
// points at the Service's value). In C:
//
//	__u32 id = svc->id;
//	__u64 *n = bpf_map_lookup_elem(&svcp_counts, &id);
//	if (n)
//		__sync_fetch_and_add(n, 1);
//
// A missing element (the Service deleted between the program's lookups) is
// not counted; the connect() is translated either way. The add is atomic
// although the element is this CPU's: the kernel runs a cgroup program with
// migration disabled but, on a preemptible kernel, not preemption, so
// another task's connect() can run the program on the same CPU in the
// middle of this one's, and a plain load-add-store would then lose one of
// the two.
func countTranslation(m *bpfMaps) asm.Instructions {
	return asm.Instructions{
		// key = svc->id
		asm.LoadMem(asm.R1, asm.R7, svcValueID, asm.Word),
		asm.StoreMem(asm.RFP, stCountKey, asm.R1, asm.Word),
		// R0 = bpf_map_lookup_elem(counts, &key): this CPU's u64, or NULL.
		asm.LoadMapPtr(asm.R1, m.counts.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stCountKey),
		asm.FnMapLookupElem.Call(),
		// No element: nothing to count; the rewrite is done already.
		asm.JEq.Imm(asm.R0, 0, "allow"),
		// *R0 += 1, atomically.
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
	}
}

// zeroCounts is a per-CPU value of zero on every CPU, as Update wants it.
func zeroCounts() []uint64 { return make([]uint64, ebpf.MustPossibleCPU()) }

// resetCount creates (or zeroes) the counter of Service ID id; k.mu held.
func (k *Kernel) resetCount(svc Service, id uint32) error {
	if err := k.m.counts.Update(&id, zeroCounts(), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("service %s: id %d: create its element in the counts map: %w", svc, id, err)
	}
	return nil
}

// deleteCount deletes the counter of Service ID id; k.mu held.
func (k *Kernel) deleteCount(svc Service, id uint32) error {
	if err := k.m.counts.Delete(&id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("service %s: id %d: delete from the counts map: %w", svc, id, err)
	}
	return nil
}

// adoptCounts creates the counters the adopted Services lack (maps pinned
// before there was a counts map), leaving those there with their counts;
// k.mu need not be held: New calls it before anyone else has the Kernel.
func (k *Kernel) adoptCounts() error {
	for svc, id := range k.ids.byService {
		err := k.m.counts.Update(&id, zeroCounts(), ebpf.UpdateNoExist)
		if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("socklb: adopted service %s: id %d: create its element in the counts map: %w", svc, id, err)
		}
	}
	return nil
}

// Connections returns how many connect()s (and unconnected UDP datagrams)
// the programs translated for each Service, since its SetService gave it an
// ID: each counter's per-CPU values summed. It implements offload/socklb's
// Counter. A Service the programs never translated for has 0.
func (k *Kernel) Connections(_ context.Context) (map[Service]uint64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[Service]uint64, len(k.ids.byService))
	var perCPU []uint64
	for svc, id := range k.ids.byService {
		err := k.m.counts.Lookup(&id, &perCPU)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			out[svc] = 0
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("service %s: id %d: read the counts map: %w", svc, id, err)
		}
		var sum uint64
		for _, n := range perCPU {
			sum += n
		}
		out[svc] = sum
	}
	return out, nil
}

// Connections returns what the Fake's Connect and SendMsg translated for
// each Service, as Kernel.Connections does the programs'.
func (f *Fake) Connections(_ context.Context) (map[Service]uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[Service]uint64, len(f.services))
	for svc, s := range f.services {
		out[svc] = f.counts[s.id]
	}
	return out, nil
}
