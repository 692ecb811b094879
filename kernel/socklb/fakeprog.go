package socklb

import (
	"fmt"
	"net/netip"
	"time"
)

// The Fake's versions of the programs: each mirrors its asm step by step
// (the lookups, the checks, the rewrite), on the Fake's maps, and says what
// it did in a Trace.

// revKey of the Fake: a socket and the backend it was sent to, the address
// unmapped (the kernel's key holds IPv4 in mapped form either way).
type fakeRevKey struct {
	cookie  uint64
	backend netip.AddrPort
}

func newFakeRevKey(cookie uint64, b netip.AddrPort) fakeRevKey {
	return fakeRevKey{cookie, netip.AddrPortFrom(b.Addr().Unmap(), b.Port())}
}

// Connect returns where a socket of protocol p, created inside the cgroup by
// client c, ends up connecting when it calls connect(dst), and the trace of
// connect4 (IPv4 dst) or connect6 (IPv6 dst) deciding it (forwardProg).
func (f *Fake) Connect(c Client, p Protocol, dst netip.AddrPort) (netip.AddrPort, Trace) {
	return f.forward("connect", c, p, dst)
}

// SendMsg returns where a datagram that client c sends with sendto(dst) on
// an unconnected UDP socket goes, and the trace of sendmsg4 or sendmsg6: the
// same decision as connect, taken per datagram.
func (f *Fake) SendMsg(c Client, dst netip.AddrPort) (netip.AddrPort, Trace) {
	return f.forward("sendmsg", c, UDP, dst)
}

// RecvMsg returns the source recvfrom() reports to client c's UDP socket for
// a datagram from src, and the trace of recvmsg4 or recvmsg6 (reverseProg).
func (f *Fake) RecvMsg(c Client, src netip.AddrPort) (netip.AddrPort, Trace) {
	return f.reverse("recvmsg", c, UDP, src)
}

// GetPeerName returns the peer getpeername() reports to client c's socket
// of protocol p, connected to peer, and the trace of getpeername4 or
// getpeername6 (reverseProg).
func (f *Fake) GetPeerName(c Client, p Protocol, peer netip.AddrPort) (netip.AddrPort, Trace) {
	return f.reverse("getpeername", c, p, peer)
}

// forward is forwardProg: the services lookup, the count check, ClientIP
// affinity's lookup, else the slot Random % count and the backends lookup,
// affinity's update, the reverse entry, the rewrite.
func (f *Fake) forward(call string, c Client, p Protocol, dst netip.AddrPort) (netip.AddrPort, Trace) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tr := Trace{Hook: hookName(call, dst.Addr()), Client: c, Protocol: p, Addr: dst, Result: dst}
	svc := Service{VIP: dst.Addr().Unmap(), Port: dst.Port(), Protocol: p}
	s, ok := f.services[svc]
	if !ok {
		tr.step("services", "lookup "+svc.String(), "miss: not a Service")
		return dst, tr
	}
	n := uint32(len(s.entry.Backends))
	tr.step("services", "lookup "+svc.String(), "id %d, %d backends", s.id, n)
	if n == 0 {
		tr.step("", "count 0", "no endpoint: untouched (the nftables path rejects)")
		return dst, tr
	}
	slot, b, hit := f.affinityLookup(&tr, c, s)
	if !hit {
		slot = c.Random % n
		b = s.entry.Backends[slot]
		tr.step("backends", fmt.Sprintf("lookup (id %d, slot %d)", s.id, slot), "%s (random %d %% %d)", b, c.Random, n)
	}
	if s.entry.AffinityTimeout > 0 {
		f.affinity[fakeAffKey{c.NetnsCookie, s.id}] = fakeAff{lastUsed: c.Now, slot: slot, backend: b}
		tr.step("affinity", fmt.Sprintf("update (netns %d, id %d)", c.NetnsCookie, s.id), "= slot %d, %s, used at %s", slot, b, c.Now)
	}
	asked := netip.AddrPortFrom(svc.VIP, svc.Port)
	f.revnat[newFakeRevKey(c.SocketCookie, b)] = asked
	tr.step("revnat", fmt.Sprintf("update (socket %d, %s)", c.SocketCookie, b), "= %s", asked)
	tr.Result = inFamily(b, dst.Addr())
	tr.step("", "user_ip, user_port", "= %s", tr.Result)
	// The counts map's add (counter.go), which the trace leaves out: it
	// changes nothing about where the socket goes.
	f.counts[s.id]++
	return tr.Result, tr
}

// fakeAffKey and fakeAff are the affinity map's key and value.
type fakeAffKey struct {
	netnsCookie uint64
	id          uint32
}

type fakeAff struct {
	lastUsed time.Duration
	slot     uint32
	backend  netip.AddrPort
}

// affinityLookup is affinity.go's first half: for a Service with ClientIP
// affinity, the namespace's last backend, if it was used less than the
// timeout ago and its slot still holds it.
func (f *Fake) affinityLookup(tr *Trace, c Client, s fakeService) (slot uint32, b netip.AddrPort, hit bool) {
	timeout := s.entry.AffinityTimeout
	if timeout == 0 {
		return 0, netip.AddrPort{}, false
	}
	key := fmt.Sprintf("lookup (netns %d, id %d)", c.NetnsCookie, s.id)
	a, ok := f.affinity[fakeAffKey{c.NetnsCookie, s.id}]
	switch {
	case !ok:
		tr.step("affinity", key, "miss")
		return 0, netip.AddrPort{}, false
	case a.lastUsed+timeout <= c.Now:
		tr.step("affinity", key, "slot %d, %s, used at %s: expired (timeout %s)", a.slot, a.backend, a.lastUsed, timeout)
		return 0, netip.AddrPort{}, false
	case int(a.slot) >= len(s.entry.Backends):
		tr.step("affinity", key, "slot %d: past the Service's %d backends", a.slot, len(s.entry.Backends))
		return 0, netip.AddrPort{}, false
	}
	tr.step("affinity", key, "slot %d, %s, used at %s: fresh (timeout %s)", a.slot, a.backend, a.lastUsed, timeout)
	held := s.entry.Backends[a.slot]
	bkey := fmt.Sprintf("lookup (id %d, slot %d)", s.id, a.slot)
	if held != a.backend {
		tr.step("backends", bkey, "%s: another backend since, pick again", held)
		return 0, netip.AddrPort{}, false
	}
	tr.step("backends", bkey, "%s: the same backend, taken", held)
	return a.slot, a.backend, true
}

// reverse is reverseProg: the revnat lookup by (socket, address), the
// rewrite to the Service address the socket asked for.
func (f *Fake) reverse(call string, c Client, p Protocol, addr netip.AddrPort) (netip.AddrPort, Trace) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tr := Trace{Hook: hookName(call, addr.Addr()), Client: c, Protocol: p, Addr: addr, Result: addr}
	k := newFakeRevKey(c.SocketCookie, addr)
	key := fmt.Sprintf("lookup (socket %d, %s)", c.SocketCookie, k.backend)
	vip, ok := f.revnat[k]
	if !ok {
		tr.step("revnat", key, "miss: not translated by this socket")
		return addr, tr
	}
	tr.step("revnat", key, "%s", vip)
	tr.Result = inFamily(vip, addr.Addr())
	tr.step("", "user_ip, user_port", "= %s", tr.Result)
	return tr.Result, tr
}
