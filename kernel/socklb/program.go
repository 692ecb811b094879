package socklb

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// Offsets of the fields of struct bpf_sock_addr (include/uapi/linux/bpf.h),
// the context a cgroup/connect4 program receives in R1. Every field is a u32.
const (
	ctxUserIP4   = 4  // user_ip4: the destination address, network byte order
	ctxUserPort  = 24 // user_port: the destination port, network byte order in the low 16 bits
	ctxProtocol  = 36 // protocol: IPPROTO_TCP or IPPROTO_UDP
	stackKey     = -8 // the map key (8 bytes) lives at R10-8 .. R10-1
	stackKeyPort = stackKey + 4
	stackKeyProt = stackKey + 6
	stackKeyPad  = stackKey + 7
)

// connect4 returns the cgroup/connect4 program over the services map. In C it
// would read:
//
//	struct key k = { ctx->user_ip4, ctx->user_port, ctx->protocol, 0 };
//	struct value *v = bpf_map_lookup_elem(&services, &k);
//	if (v) { ctx->user_ip4 = v->ip; ctx->user_port = v->port; }
//	return 1;
//
// Returning 1 lets connect() go on (to the rewritten address); 0 would fail it
// with EPERM. The kernel checks every access: the verifier rejects a program
// that reads the context at a wrong size or offset, or uses v without the NULL
// check.
func connect4(services *ebpf.Map) asm.Instructions {
	return asm.Instructions{
		// R1 holds the context; calls clobber R1-R5, so keep it in R6.
		asm.Mov.Reg(asm.R6, asm.R1),

		// Build the key on the stack (R10 is the read-only frame pointer).
		// The address: a u32 copied as is, so its bytes stay in network order.
		asm.LoadMem(asm.R2, asm.R6, ctxUserIP4, asm.Word),
		asm.StoreMem(asm.RFP, stackKey, asm.R2, asm.Word),
		// The port: the context allows only 4-byte loads of user_port; its
		// first two bytes in memory are the port in network order, and a
		// 2-byte store of the register writes exactly those (little-endian).
		asm.LoadMem(asm.R2, asm.R6, ctxUserPort, asm.Word),
		asm.StoreMem(asm.RFP, stackKeyPort, asm.R2, asm.Half),
		// The protocol, one byte, then a zero pad byte: the verifier refuses
		// a key with uninitialised stack bytes, and the hash covers all 8.
		asm.LoadMem(asm.R2, asm.R6, ctxProtocol, asm.Word),
		asm.StoreMem(asm.RFP, stackKeyProt, asm.R2, asm.Byte),
		asm.StoreImm(asm.RFP, stackKeyPad, 0, asm.Byte),

		// R0 = bpf_map_lookup_elem(services, &key)
		asm.LoadMapPtr(asm.R1, services.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackKey),
		asm.FnMapLookupElem.Call(),

		// Not a Service: leave the destination alone.
		asm.JEq.Imm(asm.R0, 0, "allow"),

		// A Service: rewrite the destination to the backend. Writes to
		// user_ip4 and user_port must be 4 bytes; the value's port is 2
		// bytes in network order followed by 2 zero bytes, so a 4-byte load
		// of it is what user_port holds.
		asm.LoadMem(asm.R2, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.R6, ctxUserIP4, asm.R2, asm.Word),
		asm.LoadMem(asm.R2, asm.R0, 4, asm.Word),
		asm.StoreMem(asm.R6, ctxUserPort, asm.R2, asm.Word),

		// return 1: connect() proceeds.
		asm.Mov.Imm(asm.R0, 1).WithSymbol("allow"),
		asm.Return(),
	}
}
