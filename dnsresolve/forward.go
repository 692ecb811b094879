package dnsresolve

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// upstreamUDPSize is the EDNS0 buffer size offered to upstreams: the DNS Flag
// Day 2020 value, which avoids IP fragmentation on common paths.
const upstreamUDPSize = 1232

// loopOption is the EDNS0 option code (RFC 6891 local/experimental range) that
// carries this process's nonce on every forwarded query: a query that arrives
// with it is one of ours that an upstream sent straight back.
const loopOption = 65042

// forwarder sends questions the Index does not own to upstream resolvers, in
// order: UDP first, TCP when the answer comes back truncated; on an error,
// a timeout, SERVFAIL or REFUSED the next upstream is asked.
type forwarder struct {
	upstreams []*upstream
	timeout   time.Duration
	udp, tcp  *dns.Client
	cache     *cache
	metrics   *metrics
	log       *slog.Logger
	nonce     [8]byte

	probes sync.Map // probe name (lower-case FQDN) -> *upstream
}

// upstream is one resolver; looping is set when we find that it is ourselves.
type upstream struct {
	addr    string // host:port
	looping atomic.Bool
}

// errNoUpstream is returned when every upstream failed or loops back to us.
var errNoUpstream = errors.New("no upstream answered")

func newForwarder(addrs []string, timeout time.Duration, c *cache, m *metrics, log *slog.Logger) *forwarder {
	f := &forwarder{
		timeout: timeout,
		udp:     &dns.Client{Net: "udp", UDPSize: upstreamUDPSize, Timeout: timeout},
		tcp:     &dns.Client{Net: "tcp", Timeout: timeout},
		cache:   c,
		metrics: m,
		log:     log,
	}
	for _, a := range addrs {
		f.upstreams = append(f.upstreams, &upstream{addr: a})
	}
	_, _ = rand.Read(f.nonce[:])
	return f
}

// forward answers req from the cache or an upstream. The answer carries req's
// ID and question and no OPT record: the Server adds its own.
func (f *forwarder) forward(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	if m := f.cache.get(req); m != nil {
		f.metrics.cacheHits.Add(1)
		return m, nil
	}
	f.metrics.cacheMisses.Add(1)
	q := f.query(req)
	var last *dns.Msg
	var errs []error
	for i, u := range f.upstreams {
		if u.looping.Load() {
			continue
		}
		f.tag(q, i)
		resp, err := f.exchange(ctx, q, u.addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("upstream %s: %w", u.addr, err))
			continue
		}
		if resp.Rcode == dns.RcodeServerFailure || resp.Rcode == dns.RcodeRefused {
			last = resp
			continue
		}
		resp = reply(req, resp)
		f.cache.put(req, resp)
		return resp, nil
	}
	if last != nil {
		return reply(req, last), nil
	}
	return nil, fmt.Errorf("%w: %w", errNoUpstream, errors.Join(errs...))
}

// query is the message sent upstream for req: a fresh ID (a forwarder must not
// reuse its client's), the one question, and our own EDNS0 record (tag adds
// the loop nonce); DO and CD are passed on.
func (f *forwarder) query(req *dns.Msg) *dns.Msg {
	q := new(dns.Msg)
	q.Id = dns.Id()
	q.RecursionDesired = req.RecursionDesired
	q.CheckingDisabled = req.CheckingDisabled
	q.Question = []dns.Question{req.Question[0]}
	do := false
	if opt := req.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	q.SetEdns0(upstreamUDPSize, do)
	return q
}

// tag sets q's loop option to our nonce and the index of the upstream it is
// sent to, so that, should it come back, isLoop knows which upstream is us.
func (f *forwarder) tag(q *dns.Msg, i int) {
	opt := q.IsEdns0()
	opt.Option = []dns.EDNS0{&dns.EDNS0_LOCAL{Code: loopOption, Data: append(f.nonce[:], byte(i))}}
}

// exchange asks one upstream over UDP and again over TCP if the answer was
// truncated (RFC 7766).
func (f *forwarder) exchange(ctx context.Context, q *dns.Msg, addr string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	f.metrics.forwards.Add(1)
	resp, _, err := f.udp.ExchangeContext(ctx, q, addr)
	if err == nil && resp.Truncated {
		f.metrics.forwardsTCP.Add(1)
		resp, _, err = f.tcp.ExchangeContext(ctx, q, addr)
	}
	if err != nil {
		f.metrics.forwardErrors.Add(1)
		return nil, err
	}
	return resp, nil
}

// reply turns an upstream's answer into ours for req.
func reply(req, resp *dns.Msg) *dns.Msg {
	resp.Id = req.Id
	resp.Question = req.Question
	extra := resp.Extra[:0:0]
	for _, rr := range resp.Extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			extra = append(extra, rr)
		}
	}
	resp.Extra = extra
	return resp
}

// isLoop reports whether req is one we forwarded (it carries our nonce) or a
// loop probe, and if so marks the upstream that brought it back.
func (f *forwarder) isLoop(req *dns.Msg) bool {
	if opt := req.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			l, ok := o.(*dns.EDNS0_LOCAL)
			if !ok || l.Code != loopOption || len(l.Data) != len(f.nonce)+1 || string(l.Data[:len(f.nonce)]) != string(f.nonce[:]) {
				continue
			}
			if i := int(l.Data[len(f.nonce)]); i < len(f.upstreams) {
				f.markLooping(f.upstreams[i], "upstream forwards back to this server; not forwarding to it")
			}
			return true
		}
	}
	if len(req.Question) != 1 {
		return false
	}
	if u, ok := f.probes.Load(dns.CanonicalName(req.Question[0].Name)); ok {
		f.markLooping(u.(*upstream), "upstream forwards back to this server; not forwarding to it")
		return true
	}
	return false
}

// probe sends each upstream a question for a random name, as CoreDNS's loop
// plugin does: if the question arrives back here, isLoop marks that upstream.
// A direct loop (the upstream is our own address) is caught by the nonce, an
// indirect one (a resolver that forwards to us) by the name.
func (f *forwarder) probe(ctx context.Context) {
	for _, u := range f.upstreams {
		if u.looping.Load() {
			continue
		}
		var r [16]byte
		_, _ = rand.Read(r[:])
		name := fmt.Sprintf("%d.%d.", binary.BigEndian.Uint64(r[:8])>>1, binary.BigEndian.Uint64(r[8:])>>1)
		f.probes.Store(name, u)
		q := new(dns.Msg).SetQuestion(name, dns.TypeHINFO)
		q.Id = dns.Id()
		pctx, cancel := context.WithTimeout(ctx, f.timeout)
		_, _, _ = f.udp.ExchangeContext(pctx, q, u.addr) // the answer does not matter
		cancel()
	}
}

// markSelf marks upstreams that are the server's own socket: the same address
// and port, or, when listening on every address, a loopback address on the same
// port (the 127.0.0.53 trap: a host's resolv.conf inside a pod's namespace).
func (f *forwarder) markSelf(local netip.AddrPort) {
	for _, u := range f.upstreams {
		ap, err := netip.ParseAddrPort(u.addr)
		if err != nil || ap.Port() != local.Port() {
			continue
		}
		ip, lip := ap.Addr().Unmap(), local.Addr().Unmap()
		if ip == lip || (lip.IsUnspecified() && ip.IsLoopback()) {
			f.markLooping(u, "upstream is this server's own address; not forwarding to it")
		}
	}
}

func (f *forwarder) markLooping(u *upstream, msg string) {
	if !u.looping.Swap(true) {
		f.metrics.loops.Add(1)
		f.log.Error(msg, "upstream", u.addr)
	}
}

// upstreamAddr normalises an --upstream entry: a bare IP gets port 53.
func upstreamAddr(s string) (string, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.String(), nil
	}
	if ip, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(ip, 53).String(), nil
	}
	if host, port, err := net.SplitHostPort(s); err == nil && host != "" && port != "" {
		return s, nil
	}
	return "", fmt.Errorf("upstream %q: not an IP address or host:port", s)
}
