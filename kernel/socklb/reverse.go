package socklb

import (
	"github.com/cilium/ebpf/asm"
)

// reverseProg returns the cgroup/recvmsg4 and cgroup/getpeername4 program
// (fam ipv4), or recvmsg6 and getpeername6 (fam ipv6): it shows a socket that
// forwardProg translated the Service address it asked for instead of the
// backend it really talks to. recvmsg() on a UDP socket reports each
// datagram's source: a reply from the backend is shown from the Service, so
// a client that checks where its answer came from (a DNS resolver does)
// accepts it. getpeername() on a connected socket, TCP or UDP, reports the
// peer: the Service again. It is Cilium's __sock4_xlate_rev and
// __sock6_xlate_rev (bpf/bpf_sock.c). In C (IPv4; IPv6 the same on
// user_ip6):
//
//	struct rev_key rk = { bpf_get_socket_cookie(ctx),
//	                      ::ffff:ctx->user_ip4, ctx->user_port };
//	struct rev_value *rv = bpf_map_lookup_elem(&svcp_revnat, &rk);
//	if (!rv)
//		return 1;              // not a translated peer: untouched
//	ctx->user_ip4 = rv->addr[3];
//	ctx->user_port = rv->port;
//	return 1;
//
// The key holds the socket's cookie, so only the socket that sent to the
// Service sees the backend's datagrams as the Service's: another socket
// talking to the same pod directly sees the pod. Cilium also checks that the
// Service still exists and drops the entry when it does not; here an entry
// lives until the LRU map evicts it, so replies keep coming from the address
// the socket sent to, also after the Service is deleted: it is what the
// socket asked for.
func reverseProg(fam family, m *bpfMaps) asm.Instructions {
	insns := asm.Instructions{
		// R1 holds the context; calls clobber R1-R5, so keep it in R6.
		asm.Mov.Reg(asm.R6, asm.R1),
	}
	insns = append(insns, loadRevKeyCookie()...)
	// key.addr, key.port = the context's address and port: the datagram's
	// source, or the peer.
	insns = append(insns, loadAddr(fam, stRevKeyAddr)...)
	insns = append(insns,
		// R0 = bpf_map_lookup_elem(revnat, &key)
		asm.LoadMapPtr(asm.R1, m.revnat.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stRevKey),
		asm.FnMapLookupElem.Call(),
		// No entry: not a peer this socket reached through a Service.
		asm.JEq.Imm(asm.R0, 0, "allow"),
	)
	// The rewrite: the address the socket asked for.
	insns = append(insns, storeAddr(fam, asm.R0, 0)...)
	return append(insns, allow("allow")...)
}
