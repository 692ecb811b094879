package socklb

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/kernel/internal/tracing"
)

// Client is the socket a Fake call comes from, as the programs see it.
type Client struct {
	// NetnsCookie is what bpf_get_netns_cookie returns: the socket's network
	// namespace (a pod), the key of ClientIP affinity.
	NetnsCookie uint64

	// SocketCookie is what bpf_get_socket_cookie returns: the socket, the
	// first half of the reverse-translation map's key.
	SocketCookie uint64

	// Random is what bpf_get_prandom_u32 returns for this call: the slot
	// picked is Random % count, so Random i picks slot i.
	Random uint32

	// Now is what bpf_ktime_get_ns returns for this call, the clock of
	// ClientIP affinity: a Fake's clock is its callers'.
	Now time.Duration
}

// Step is one thing a program did: a map lookup and what it found, or a
// rewrite.
type Step struct {
	Map  string // the map looked up or updated ("services", "affinity", "backends", "revnat"), or "" for the context
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
	header := fmt.Sprintf("%s %s %s, netns cookie %d, socket cookie %d", t.Hook, t.Protocol, t.Addr, t.Client.NetnsCookie, t.Client.SocketCookie)
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
