package dnsresolve

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/singleflight"
)

// upstreamUDPSize is the EDNS0 buffer size offered to upstreams: the DNS Flag
// Day 2020 value, which avoids IP fragmentation on common paths.
const upstreamUDPSize = 1232

// forwarder sends questions the Index does not own to upstream resolvers, as
// CoreDNS's forward plugin does with kubeadm's options:
//
//   - in order, healthy upstreams first: UDP, TCP when the answer comes back
//     truncated; on an error, a timeout, SERVFAIL or REFUSED the next one is
//     asked. An upstream whose exchanges failed MaxFails times in a row is
//     down: it is asked only when no upstream is healthy, and probed in the
//     background until it answers again (health.go);
//   - at most MaxConcurrent client queries wait for upstreams at once; beyond
//     that a query is REFUSED at once instead of holding a goroutine and a
//     socket;
//   - one upstream exchange per (name, type, class, DO, CD) at a time: the
//     clients asking the same question meanwhile share its answer
//     (singflight), and the cache keeps it for its TTL;
//   - a query of ours that comes back to us is a forwarding loop (loop.go).
type forwarder struct {
	upstreams     []*upstream
	timeout       time.Duration
	maxFails      uint32
	maxConcurrent int64
	udp, tcp      *dns.Client
	cache         *cache
	metrics       *serverMetrics
	log           *slog.Logger
	nonce         [8]byte
	now           func() time.Time
	opts          ForwardOptions
	policy        policy

	inflight atomic.Int64 // client queries waiting for an upstream
	flights  singleflight.Group
	loops    loopDetector
}

// upstream is one resolver and what we know about its health.
type upstream struct {
	addr     string        // host:port
	maxFails uint32        // consecutive failures that mark it down
	fails    atomic.Uint32 // consecutive failed exchanges
	looping  atomic.Bool   // it sends our queries back to us (loop.go)
	self     bool          // it is our own socket: a loop that cannot end
}

// healthy reports whether u is not marked down.
func (u *upstream) healthy() bool { return u.fails.Load() < u.maxFails }

var (
	// errNoUpstream is returned when every upstream failed or loops back to us.
	errNoUpstream = errors.New("no upstream answered")
	// errMaxConcurrent is returned when MaxConcurrent queries are in flight.
	errMaxConcurrent = errors.New("too many concurrent upstream queries")
)

// forwarderConfig holds the forwarder's settings, defaults already applied.
type forwarderConfig struct {
	timeout       time.Duration
	maxFails      uint32
	maxConcurrent int
	now           func() time.Time
	opts          ForwardOptions
}

func newForwarder(addrs []string, cfg forwarderConfig, c *cache, log *slog.Logger) *forwarder {
	f := &forwarder{
		timeout:       cfg.timeout,
		maxFails:      cfg.maxFails,
		maxConcurrent: int64(cfg.maxConcurrent),
		udp:           &dns.Client{Net: "udp", UDPSize: upstreamUDPSize, Timeout: cfg.timeout},
		tcp:           &dns.Client{Net: "tcp", Timeout: cfg.timeout},
		cache:         c,
		log:           log,
		now:           cfg.now,
		opts:          cfg.opts,
	}
	f.policy.name = cfg.opts.Policy
	for _, a := range addrs {
		f.upstreams = append(f.upstreams, &upstream{addr: a, maxFails: cfg.maxFails})
	}
	_, _ = rand.Read(f.nonce[:])
	return f
}

// forward answers req from the cache or an upstream. The answer carries req's
// ID and question and no OPT record: the Server adds its own.
func (f *forwarder) forward(ctx context.Context, req *dns.Msg) (*dns.Msg, cacheHit, error) {
	if m, hit := f.cache.get(req); m != nil {
		return m, hit, nil
	}
	if f.inflight.Add(1) > f.maxConcurrent {
		f.inflight.Add(-1)
		f.metrics.maxConcurrentRejects.Inc()
		return nil, cacheMissed, errMaxConcurrent
	}
	defer f.inflight.Add(-1)

	// The flight is not tied to one client's context: others may wait on it.
	v, err, shared := f.flights.Do(keyOf(req).flight(), func() (any, error) {
		return f.resolve(context.WithoutCancel(ctx), req)
	})
	if err != nil {
		return nil, cacheMissed, err
	}
	resp := v.(*dns.Msg)
	if shared {
		resp = resp.Copy() // every waiter rewrites its own ID and question
	}
	return reply(req, resp), cacheMissed, nil
}

// resolve asks the upstreams for req, healthy ones first, and caches the answer.
func (f *forwarder) resolve(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	q := f.query(req)
	var last *dns.Msg
	var errs []error
	for _, i := range f.order() {
		u := f.upstreams[i]
		f.loops.tag(q, f.nonce, i)
		resp, err := f.exchange(ctx, q, u.addr)
		if err != nil {
			f.failed(u, err)
			errs = append(errs, fmt.Errorf("upstream %s: %w", u.addr, err))
			continue
		}
		u.fails.Store(0)
		if f.opts.failsOver(resp.Rcode) {
			last = resp
			continue
		}
		f.cache.put(req, resp)
		return resp, nil
	}
	if last != nil {
		f.cache.put(req, last) // a SERVFAIL, when ServfailTTL keeps one
		return last, nil
	}
	return nil, fmt.Errorf("%w: %w", errNoUpstream, errors.Join(errs...))
}

// order returns the indexes of the upstreams to ask, in the policy's order
// (configured order by default): the healthy ones; when none is healthy,
// every one that does not loop (CoreDNS then picks one at random: an
// upstream that is down may be back).
func (f *forwarder) order() []int {
	var healthy, all []int
	for i, u := range f.upstreams {
		if u.looping.Load() {
			continue
		}
		all = append(all, i)
		if u.healthy() {
			healthy = append(healthy, i)
		}
	}
	if len(healthy) > 0 {
		return f.policy.order(healthy)
	}
	if len(all) > 0 {
		f.metrics.healthcheckBroken.Inc() // CoreDNS: every upstream down
	}
	return f.policy.order(all)
}

// failed counts a failed exchange with u; the one that reaches maxFails marks
// it down, and the health checker starts probing it.
func (f *forwarder) failed(u *upstream, err error) {
	if u.fails.Add(1) == u.maxFails {
		f.log.Warn("upstream down: asking the others first and probing it", "upstream", u.addr, "err", err)
	}
}

// query is the message sent upstream for req: a fresh ID (a forwarder must not
// reuse its client's), the one question, and our own EDNS0 record (the loop
// detector adds its nonce); DO and CD are passed on.
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

// exchange asks one upstream over UDP and again over TCP if the answer was
// truncated (RFC 7766).
func (f *forwarder) exchange(ctx context.Context, q *dns.Msg, addr string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	f.metrics.forwards.Inc()
	start, proto := time.Now(), "udp"
	var resp *dns.Msg
	var err error
	if f.opts.ForceTCP {
		proto = "tcp"
		resp, _, err = f.tcp.ExchangeContext(ctx, q, addr)
	} else {
		resp, _, err = f.udp.ExchangeContext(ctx, q, addr)
		if err == nil && resp.Truncated {
			f.metrics.proxyObserve(addr, proto, resp.Rcode, time.Since(start))
			f.metrics.forwardsTCP.Inc()
			start, proto = time.Now(), "tcp"
			resp, _, err = f.tcp.ExchangeContext(ctx, q, addr)
		}
	}
	if err != nil {
		f.metrics.forwardErrors.Inc()
		return nil, err
	}
	f.metrics.proxyObserve(addr, proto, resp.Rcode, time.Since(start))
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
			u.self = true
			f.markLooping(u, "upstream is this server's own address; not forwarding to it")
		}
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
