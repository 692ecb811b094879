package socklb

import (
	"github.com/cilium/ebpf/asm"
)

// connectProg returns the cgroup/connect4 (fam ipv4) or cgroup/connect6 (fam
// ipv6) program: it rewrites connect()'s destination from a Service to one of
// its backends, once per socket, as Cilium's __sock4_xlate_fwd and
// __sock6_xlate_fwd do (bpf/bpf_sock.c). In C (connect4; connect6 the same on
// user_ip6):
//
//	struct svc_key k = { .addr = ::ffff:ctx->user_ip4, .port = ctx->user_port,
//	                     .protocol = ctx->protocol };
//	struct svc_value *svc = bpf_map_lookup_elem(&svcp_services, &k);
//	if (!svc || svc->count == 0)
//		return 1;              // not a Service, or no endpoint: untouched
//	struct backend_key bk = { svc->id, bpf_get_prandom_u32() % svc->count };
//	struct backend *b = bpf_map_lookup_elem(&svcp_backends, &bk);
//	if (!b)
//		return 1;              // a slot deleted under us: untouched
//	ctx->user_ip4 = b->addr[3];
//	ctx->user_port = b->port;
//	return 1;
//
// The random slot is Cilium's (sock_select_random_slot) and, in effect,
// kube-proxy's iptables statistic rules: each backend with probability 1/count.
// An IPv6 socket connecting to an IPv4-mapped address (::ffff:198.18.0.10)
// runs connect6, whose key is then that IPv4 Service's: it gets the IPv4
// backend in mapped form, as Cilium's sock6_xlate_fwd hands such addresses to
// its IPv4 path.
func connectProg(fam family, m *bpfMaps) asm.Instructions {
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
	insns = append(insns, pickBackend()...)
	insns = append(insns,
		// R0 = bpf_map_lookup_elem(backends, &(id, slot)).
		asm.LoadMapPtr(asm.R1, m.backends.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stBackendKey),
		asm.FnMapLookupElem.Call(),
		// The slot is gone (SetService shrank the Service between our two
		// lookups): untouched rather than a wrong guess.
		asm.JEq.Imm(asm.R0, 0, "allow"),
	)
	// The rewrite: the socket now connects to the backend.
	insns = append(insns, storeAddr(fam, asm.R0, 0)...)
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
