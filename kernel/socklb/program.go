package socklb

import (
	"github.com/cilium/ebpf/asm"
)

// The programs are written with cilium/ebpf's asm package, one Go value per
// instruction, each with a comment (docs/design.md says why asm rather
// than C). This file holds what they share: the context's layout, the stack's
// layout, and the instruction sequences the programs repeat. Each program is
// in a file of its own (connect.go, with affinity.go; reverse.go), its C
// equivalent in its doc comment.
//
// A cgroup sock_addr program receives a *struct bpf_sock_addr in R1 and
// returns 1 to let the system call go on (with whatever address it left in
// the context) or 0 to fail it with EPERM; ours always return 1. R0 is the
// return value and a helper call's result, R1-R5 a call's arguments
// (clobbered by it), R6-R9 survive calls, R10 is the read-only frame pointer:
// the stack lives below it, 512 bytes.

// family is the address family a program is built for: the hooks come in
// pairs (connect4 and connect6, ...) that differ only in where the context
// holds the address.
type family int

const (
	ipv4 family = 4
	ipv6 family = 6
)

// Offsets of the fields of struct bpf_sock_addr (include/uapi/linux/bpf.h).
// Every field is a u32; user_ip6 is four of them. The verifier allows only
// 4-byte loads and stores of these, at exactly these offsets.
const (
	ctxUserIP4  = 4  // user_ip4: the destination (connect, sendmsg) or source (recvmsg) address
	ctxUserIP6  = 8  // user_ip6[4]: the same for IPv6, 8..23
	ctxUserPort = 24 // user_port: the port, network byte order in the low 16 bits
	ctxProtocol = 36 // protocol: IPPROTO_TCP or IPPROTO_UDP
)

// The stack, as offsets from R10. Every key a program passes to a map helper
// is built here, every byte of it initialised: the verifier refuses a helper
// reading uninitialised stack, and the hash covers every byte.
const (
	stSvcKey      = -24 // svcKey, 20 bytes: -24 .. -5
	stSvcKeyProto = stSvcKey + svcKeyProtocol
	stBackendKey  = -32 // backendKey, 8 bytes: -32 .. -25
	stBackendSlot = stBackendKey + backendKeySlot
	stRevKey      = -64 // revKey, 32 bytes: -64 .. -33 (the cookie 8-aligned)
	stRevKeyAddr  = stRevKey + revKeyAddr
	stRevValue    = -88  // revValue, 20 bytes: -88 .. -69
	stAffKey      = -104 // affKey, 16 bytes: -104 .. -89
	stAffValue    = -144 // affValue, 40 bytes: -144 .. -105
)

// mappedPrefix is the third word of an IPv4-mapped IPv6 address: the bytes
// 00 00 ff ff, which a little-endian u32 store writes from 0xffff0000 (as a
// 32-bit immediate: -65536).
const mappedPrefix = -65536

// loadAddr copies the context's address and port to the stack at off, in
// the maps' form (R6 must hold the context): 16 bytes of address, IPv4 as
// IPv4-mapped IPv6, then the port's two bytes and two zero bytes, 20 bytes
// in all. connect and sendmsg find the destination there, recvmsg the
// source, getpeername the peer.
func loadAddr(fam family, off int16) asm.Instructions {
	var insns asm.Instructions
	if fam == ipv4 {
		insns = asm.Instructions{
			// The address as IPv4-mapped IPv6: ten zero bytes, ff ff,
			// then user_ip4 copied as is (its bytes stay in network order).
			asm.StoreImm(asm.RFP, off, 0, asm.Word),
			asm.StoreImm(asm.RFP, off+4, 0, asm.Word),
			asm.StoreImm(asm.RFP, off+8, mappedPrefix, asm.Word),
			asm.LoadMem(asm.R2, asm.R6, ctxUserIP4, asm.Word),
			asm.StoreMem(asm.RFP, off+12, asm.R2, asm.Word),
		}
	} else {
		for i := int16(0); i < 16; i += 4 {
			insns = append(insns,
				// user_ip6[i/4], a word of the address in network order.
				asm.LoadMem(asm.R2, asm.R6, ctxUserIP6+i, asm.Word),
				asm.StoreMem(asm.RFP, off+i, asm.R2, asm.Word),
			)
		}
	}
	return append(insns,
		// The port: the context allows only 4-byte loads of user_port, which
		// give the 16-bit port zero-extended; its first two bytes in memory
		// are the port in network order, and a 4-byte store of the register
		// writes exactly those, then two zero bytes (little-endian).
		asm.LoadMem(asm.R2, asm.R6, ctxUserPort, asm.Word),
		asm.StoreMem(asm.RFP, off+16, asm.R2, asm.Word),
	)
}

// loadSvcKey builds the services map's key on the stack from the context's
// address, port and protocol (R6 must hold the context).
func loadSvcKey(fam family) asm.Instructions {
	return append(loadAddr(fam, stSvcKey),
		// The protocol, one byte, over the first of the port's two zero
		// bytes; the second stays zero: the key's pad byte.
		asm.LoadMem(asm.R2, asm.R6, ctxProtocol, asm.Word),
		asm.StoreMem(asm.RFP, stSvcKeyProto, asm.R2, asm.Byte),
	)
}

// loadRevKeyCookie writes the socket's cookie into the reverse-translation
// key on the stack (R6 must hold the context). It calls a helper: R1-R5 are
// clobbered.
func loadRevKeyCookie() asm.Instructions {
	return asm.Instructions{
		// R0 = bpf_get_socket_cookie(ctx): this socket, for the whole boot.
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnGetSocketCookie.Call(),
		// key.cookie = R0; the six bytes after the port are zero.
		asm.StoreMem(asm.RFP, stRevKey, asm.R0, asm.DWord),
		asm.StoreImm(asm.RFP, stRevKey+28, 0, asm.Word),
	}
}

// copy20 copies the 20 bytes (an address, a port, two zero bytes) at src+off
// to the stack at dst, a word at a time.
func copy20(src asm.Register, off, dst int16) asm.Instructions {
	var insns asm.Instructions
	for i := int16(0); i < 20; i += 4 {
		insns = append(insns,
			asm.LoadMem(asm.R2, src, off+i, asm.Word),
			asm.StoreMem(asm.RFP, dst+i, asm.R2, asm.Word),
		)
	}
	return insns
}

// storeAddr writes the 16-byte address at src+off into the context's
// address (R6 must hold the context): for IPv4 its last word (the IPv4
// address of the mapped form), for IPv6 all four words. The port's word at
// src+off+16 goes to user_port. The verifier wants 4-byte context stores.
func storeAddr(fam family, src asm.Register, off int16) asm.Instructions {
	var insns asm.Instructions
	if fam == ipv4 {
		insns = asm.Instructions{
			// user_ip4 = the IPv4 address in the mapped form's last word.
			asm.LoadMem(asm.R2, src, off+12, asm.Word),
			asm.StoreMem(asm.R6, ctxUserIP4, asm.R2, asm.Word),
		}
	} else {
		for i := int16(0); i < 16; i += 4 {
			insns = append(insns,
				// user_ip6[i/4] = the address's word i/4.
				asm.LoadMem(asm.R2, src, off+i, asm.Word),
				asm.StoreMem(asm.R6, ctxUserIP6+i, asm.R2, asm.Word),
			)
		}
	}
	return append(insns,
		// user_port = the port's two bytes and two zero bytes.
		asm.LoadMem(asm.R2, src, off+16, asm.Word),
		asm.StoreMem(asm.R6, ctxUserPort, asm.R2, asm.Word),
	)
}

// allow is every program's end: return 1, the system call goes on.
func allow(label string) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Imm(asm.R0, 1).WithSymbol(label), // R0 = 1: go on
		asm.Return(),                             // exit
	}
}
