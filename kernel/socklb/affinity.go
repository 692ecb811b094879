package socklb

import (
	"github.com/cilium/ebpf/asm"
)

// ClientIP affinity, as forwardProg does it: before picking a random slot, a
// Service with flagAffinity looks up the backend the client's network
// namespace reached last, and takes it again while that was less than the
// Service's timeout ago; after picking, it records the choice and the time.
// It is Cilium's lb4_affinity_backend_id_by_netns and
// lb4_update_affinity_by_netns (bpf/lib/lb.h), keyed as Cilium keys it for
// the socket hooks: by bpf_get_netns_cookie, the pod, not by the client's
// IP, which a hook at connect() does not know yet. In C:
//
//	struct aff_key ak = {};
//	if (svc->flags & AFFINITY) {
//		ak = (struct aff_key){ bpf_get_netns_cookie(ctx), svc->id };
//		struct aff_value *a = bpf_map_lookup_elem(&svcp_affinity, &ak);
//		if (a && a->last_used + svc->timeout > bpf_ktime_get_ns() &&
//		    a->slot < svc->count) {
//			bk = (struct backend_key){ svc->id, a->slot };
//			b = bpf_map_lookup_elem(&svcp_backends, &bk);
//			if (b && b->addr == a->addr && b->port == a->port)
//				goto chosen;   // the same backend as last time
//		}
//	}
//	... a random slot, b = its backend ...
//	chosen:
//	if (svc->flags & AFFINITY) {
//		struct aff_value av = { bpf_ktime_get_ns(), bk.slot, b->addr, b->port };
//		bpf_map_update_elem(&svcp_affinity, &ak, &av, BPF_ANY);
//	}
//
// The address check catches a slot that holds another backend since (the
// Service's endpoints changed, or its ID was recycled): the client then
// gets a new random backend, where kube-proxy would keep the old one while
// it exists at all. Cilium checks membership in a map of its own
// (lb_affinity_match); comparing the address costs no map.

// affinityLookup is the first half: on a hit it leaves the backend in R9
// and the backends map's key on the stack and jumps to "chosen"; otherwise
// it goes on to "random". R6 holds the context, R7 the Service's value, R8
// its backend count.
func affinityLookup(m *bpfMaps) asm.Instructions {
	insns := asm.Instructions{
		// Zero the key first: "chosen" checks the flag again, and the
		// verifier, walking every path, cannot know that both checks of a
		// map value agree; it must find the key initialised either way.
		// (4-byte stores: cilium/ebpf's asm has no 8-byte store of an
		// immediate.)
		asm.StoreImm(asm.RFP, stAffKey, 0, asm.Word),
		asm.StoreImm(asm.RFP, stAffKey+4, 0, asm.Word),
		asm.StoreImm(asm.RFP, stAffKey+8, 0, asm.Word),
		asm.StoreImm(asm.RFP, stAffKey+12, 0, asm.Word),
		// No ClientIP affinity: a random slot.
		asm.LoadMem(asm.R1, asm.R7, svcValueFlags, asm.Word),
		asm.And.Imm(asm.R1, flagAffinity),
		asm.JEq.Imm(asm.R1, 0, "random"),
		// key.netns_cookie = bpf_get_netns_cookie(ctx): the pod.
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnGetNetnsCookie.Call(),
		asm.StoreMem(asm.RFP, stAffKey, asm.R0, asm.DWord),
		// key.id = svc->id
		asm.LoadMem(asm.R1, asm.R7, svcValueID, asm.Word),
		asm.StoreMem(asm.RFP, stAffKey+affKeyID, asm.R1, asm.Word),
		// R0 = bpf_map_lookup_elem(affinity, &key); none: a random slot.
		asm.LoadMapPtr(asm.R1, m.affinity.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stAffKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "random"),
		// Keep the entry in R9 across the next call.
		asm.Mov.Reg(asm.R9, asm.R0),
		// R0 = bpf_ktime_get_ns(); expired when last_used + timeout <= now
		// (unsigned: both count from boot and never wrap).
		asm.FnKtimeGetNs.Call(),
		asm.LoadMem(asm.R1, asm.R9, 0, asm.DWord),
		asm.LoadMem(asm.R2, asm.R7, svcValueTimeout, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R2),
		asm.JLE.Reg(asm.R1, asm.R0, "random"),
		// The slot, if the Service still has it, becomes the backends
		// map's key.
		asm.LoadMem(asm.R1, asm.R9, affValueSlot, asm.Word),
		asm.JGE.Reg(asm.R1, asm.R8, "random"),
		asm.StoreMem(asm.RFP, stBackendSlot, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, svcValueID, asm.Word),
		asm.StoreMem(asm.RFP, stBackendKey, asm.R1, asm.Word),
		// R0 = bpf_map_lookup_elem(backends, &(id, slot)).
		asm.LoadMapPtr(asm.R1, m.backends.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stBackendKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "random"),
	}
	for i := int16(0); i < 20; i += 4 {
		insns = append(insns,
			// The slot holds another backend than last time: random.
			asm.LoadMem(asm.R1, asm.R0, i, asm.Word),
			asm.LoadMem(asm.R2, asm.R9, affValueAddr+i, asm.Word),
			asm.JNE.Reg(asm.R1, asm.R2, "random"),
		)
	}
	return append(insns,
		// The same backend: take it.
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.Ja.Label("chosen"),
	)
}

// affinityUpdate is the second half, at "chosen": for a Service with
// affinity, it records the backend in R9, at the slot in the backends map's
// key on the stack, as the namespace's, now. A failed update is ignored:
// the connection goes on, the next one may pick another backend.
func affinityUpdate(m *bpfMaps) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R1, asm.R7, svcValueFlags, asm.Word).WithSymbol("chosen"),
		asm.And.Imm(asm.R1, flagAffinity),
		asm.JEq.Imm(asm.R1, 0, "chosen_done"),
		// value.last_used = bpf_ktime_get_ns()
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, stAffValue, asm.R0, asm.DWord),
		// value.slot = key.slot, then four zero bytes
		asm.LoadMem(asm.R1, asm.RFP, stBackendSlot, asm.Word),
		asm.StoreMem(asm.RFP, stAffValue+affValueSlot, asm.R1, asm.Word),
		asm.StoreImm(asm.RFP, stAffValue+affValueSlot+4, 0, asm.Word),
	}
	// value.addr, value.port = the backend's (and its two zero bytes),
	// then the last four zero bytes.
	insns = append(insns, copy20(asm.R9, 0, stAffValue+affValueAddr)...)
	return append(insns,
		asm.StoreImm(asm.RFP, stAffValue+affValueAddr+20, 0, asm.Word),
		// bpf_map_update_elem(affinity, &key, &value, BPF_ANY)
		asm.LoadMapPtr(asm.R1, m.affinity.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stAffKey),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stAffValue),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
		// The result is not looked at; a no-op to land the jump above on.
		asm.Mov.Imm(asm.R0, 0).WithSymbol("chosen_done"),
	)
}
