package socklb

import (
	"github.com/cilium/ebpf/asm"
)

// forwardProg returns the cgroup/connect4 and cgroup/sendmsg4 program (fam
// ipv4), or connect6 and sendmsg6 (fam ipv6): it rewrites the destination of
// connect(), or of sendmsg() on an unconnected UDP socket, from a Service to
// one of its backends, and records the rewrite so that recvmsg() and
// getpeername() can undo it. It is Cilium's __sock4_xlate_fwd and
// __sock6_xlate_fwd (bpf/bpf_sock.c), which serve both hooks too. In C
// (the IPv4 program; the IPv6 one the same on user_ip6):
//
//	struct svc_key k = { .addr = ::ffff:ctx->user_ip4, .port = ctx->user_port,
//	                     .protocol = ctx->protocol };
//	struct svc_value *svc = bpf_map_lookup_elem(&svcp_services, &k);
//	if (!svc || svc->count == 0)
//		return 1;              // not a Service, or no endpoint: untouched
//	... ClientIP affinity: the last backend, goto chosen (affinity.go) ...
//	struct backend_key bk = { svc->id, bpf_get_prandom_u32() % svc->count };
//	struct backend *b = bpf_map_lookup_elem(&svcp_backends, &bk);
//	if (!b)
//		return 1;              // a slot deleted under us: untouched
//	chosen:
//	... ClientIP affinity: remember b (affinity.go) ...
//	struct rev_key rk = { bpf_get_socket_cookie(ctx), b->addr, b->port };
//	struct rev_value rv = { ::ffff:ctx->user_ip4, ctx->user_port };
//	if (bpf_map_update_elem(&svcp_revnat, &rk, &rv, BPF_ANY))
//		return 1;              // no way back: untouched, as Cilium
//	ctx->user_ip4 = b->addr[3];
//	ctx->user_port = b->port;
//	return 1;
//
// The random slot is Cilium's (sock_select_random_slot) and, in effect,
// kube-proxy's iptables statistic rules: each backend with probability 1/count.
// sendmsg() picks a slot per datagram, so an unconnected UDP socket spreads
// its datagrams (a DNS client's queries) over the backends, as kube-proxy's
// DNAT spreads new UDP flows. An IPv6 socket connecting to an IPv4-mapped
// address (::ffff:198.18.0.10) runs connect6, whose key is then that IPv4
// Service's: it gets the IPv4 backend in mapped form, as Cilium's
// sock6_xlate_fwd hands such addresses to its IPv4 path.
func forwardProg(fam family, m *bpfMaps) asm.Instructions {
	insns := asm.Instructions{
		// R1 holds the context; calls clobber R1-R5, so keep it in R6.
		asm.Mov.Reg(asm.R6, asm.R1),
	}
	insns = append(insns, loadSvcKey(fam)...)
	insns = append(insns,
		// R0 = bpf_map_lookup_elem(services, &key): a pointer to the value
		// or NULL.
		asm.LoadMapPtr(asm.R1, m.services.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stSvcKey),
		asm.FnMapLookupElem.Call(),
		// Not a Service: leave the destination alone. (The verifier insists
		// on this NULL check before any use of R0.)
		asm.JEq.Imm(asm.R0, 0, "allow"),
		// Keep the Service's value in R7, its backend count in R8: both
		// survive the calls to come.
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R8, asm.R7, svcValueCount, asm.Word),
		// No backend: untouched; the nftables path beside rejects it.
		asm.JEq.Imm(asm.R8, 0, "allow"),
	)
	// ClientIP affinity (affinity.go): the namespace's last backend, if
	// still fresh, jumps to "chosen".
	insns = append(insns, affinityLookup(m)...)
	random := pickBackend()
	random[0] = random[0].WithSymbol("random")
	insns = append(insns, random...)
	insns = append(insns,
		// R0 = bpf_map_lookup_elem(backends, &(id, slot)).
		asm.LoadMapPtr(asm.R1, m.backends.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stBackendKey),
		asm.FnMapLookupElem.Call(),
		// The slot is gone (SetService shrank the Service between our two
		// lookups): untouched rather than a wrong guess.
		asm.JEq.Imm(asm.R0, 0, "allow"),
		// Keep the backend in R9.
		asm.Mov.Reg(asm.R9, asm.R0),
	)
	// Remember the choice for ClientIP affinity.
	insns = append(insns, affinityUpdate(m)...)
	insns = append(insns, recordRev(fam, m)...)
	// The rewrite: the socket now connects (or sends) to the backend.
	insns = append(insns, storeAddr(fam, asm.R9, 0)...)
	// Count the translation for the Service (counter.go).
	insns = append(insns, countTranslation(m)...)
	return append(insns, allow("allow")...)
}

// pickBackend builds the backends map's key on the stack: the Service's ID
// (R7 points at its value) and a random slot below its count (R8).
func pickBackend() asm.Instructions {
	return asm.Instructions{
		// key.id = svc->id
		asm.LoadMem(asm.R1, asm.R7, svcValueID, asm.Word),
		asm.StoreMem(asm.RFP, stBackendKey, asm.R1, asm.Word),
		// R0 = bpf_get_prandom_u32(), then R0 %= count (32-bit modulo;
		// count is not 0, checked above).
		asm.FnGetPrandomU32.Call(),
		asm.Mod.Reg32(asm.R0, asm.R8),
		// key.slot = R0
		asm.StoreMem(asm.RFP, stBackendSlot, asm.R0, asm.Word),
	}
}

// recordRev writes the reverse-translation entry (socket cookie, backend) ->
// the Service address the call came with, before the context is rewritten
// (R6 holds the context, R9 the backend). Cilium's sock4_update_revnat. When
// the update fails, the program ends untouched: a socket whose replies
// could not be shown from the Service address is better left to the
// nftables path.
func recordRev(fam family, m *bpfMaps) asm.Instructions {
	insns := loadRevKeyCookie()
	// key.addr, key.port = the backend's address and port (and its two
	// zero bytes).
	insns = append(insns, copy20(asm.R9, 0, stRevKeyAddr)...)
	// value = the address and port in the context: still the Service's.
	insns = append(insns, loadAddr(fam, stRevValue)...)
	return append(insns,
		// R0 = bpf_map_update_elem(revnat, &key, &value, BPF_ANY)
		asm.LoadMapPtr(asm.R1, m.revnat.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stRevKey),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stRevValue),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
		// Not 0: the update failed; leave the call alone.
		asm.JNE.Imm(asm.R0, 0, "allow"),
	)
}
