package socklb

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/kernel/internal/tracing"
)

// Client is the socket a Fake call comes from, as the programs see it.
type Client struct {
	// NetnsCookie is what bpf_get_netns_cookie returns: the socket's network
	// namespace (a pod), the key of ClientIP affinity.
	NetnsCookie uint64

	// Random is what bpf_get_prandom_u32 returns for this call: the slot
	// picked is Random % count, so Random i picks slot i.
	Random uint32
}

// Step is one thing a program did: a map lookup and what it found, or a
// rewrite.
type Step struct {
	Map  string // the map looked up ("services", "backends"), or "" for the context
	Key  string // the key, decoded
	Note string // what came of it
}

// Trace is what a hook did with one system call and why.
type Trace struct {
	Hook     string // "connect4", "connect6", ...
	Client   Client
	Protocol Protocol
	Addr     netip.AddrPort // the address the call came with
	Steps    []Step
	Result   netip.AddrPort // the address it went on with
}

// Translated says whether the hook rewrote the address.
func (t Trace) Translated() bool { return t.Result != t.Addr }

// String prints the call, the steps in aligned columns, and the result.
func (t Trace) String() string {
	var b strings.Builder
	lines := make([]tracing.Line, len(t.Steps))
	for i, s := range t.Steps {
		where := s.Map
		if where == "" {
			where = "ctx"
		}
		lines[i] = tracing.Line{Where: where, Rule: s.Key, Note: s.Note}
	}
	result := "untouched " + t.Result.String()
	if t.Translated() {
		result = "rewritten to " + t.Result.String()
	}
	header := fmt.Sprintf("%s %s %s, netns cookie %d", t.Hook, t.Protocol, t.Addr, t.Client.NetnsCookie)
	tracing.Print(&b, header, lines, result, 0, 1)
	return b.String()
}

func (t *Trace) step(m, key, note string, args ...any) {
	t.Steps = append(t.Steps, Step{Map: m, Key: key, Note: fmt.Sprintf(note, args...)})
}

// hookName is the hook a call on addr runs: the socket's family shows in the
// address (an IPv4-mapped address is an IPv6 socket's).
func hookName(call string, addr netip.Addr) string {
	if addr.Is4() {
		return call + "4"
	}
	return call + "6"
}

// inFamily returns b as the hook writes it for a call on addr: IPv4-mapped
// when addr is (an IPv6 socket reaching an IPv4 Service).
func inFamily(b netip.AddrPort, addr netip.Addr) netip.AddrPort {
	if addr.Is4In6() {
		return netip.AddrPortFrom(netip.AddrFrom16(b.Addr().As16()), b.Port())
	}
	return b
}

// Connect returns where a socket of protocol p, created inside the cgroup by
// client c, ends up connecting when it calls connect(dst), and the trace of
// connect4 (IPv4 dst) or connect6 (IPv6 dst) deciding it. It mirrors
// connectProg step by step: the services lookup, the count check, the slot
// Random % count, the backends lookup, the rewrite.
func (f *Fake) Connect(c Client, p Protocol, dst netip.AddrPort) (netip.AddrPort, Trace) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tr := Trace{Hook: hookName("connect", dst.Addr()), Client: c, Protocol: p, Addr: dst, Result: dst}
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
	slot := c.Random % n
	b := s.entry.Backends[slot]
	tr.step("backends", fmt.Sprintf("lookup (id %d, slot %d)", s.id, slot), "%s (random %d %% %d)", b, c.Random, n)
	tr.Result = inFamily(b, dst.Addr())
	tr.step("", "user_ip, user_port", "= %s", tr.Result)
	return tr.Result, tr
}
