package dnsresolve

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
)

// loopOption is the EDNS0 option code (RFC 6891 local/experimental range) that
// carries this process's nonce on every forwarded query: a query that arrives
// with it is one of ours that an upstream sent straight back.
const loopOption = 65042

// loopDetector finds upstreams that forward our queries back to us, two ways:
//
//   - every forwarded query carries our nonce and the index of the upstream it
//     went to: a direct loop (the upstream is us, or forwards to us keeping
//     EDNS options) is seen on the first query;
//   - a probe, a question for a random name, as CoreDNS's loop plugin sends:
//     an indirect loop through a resolver that drops EDNS options brings the
//     name back. Probes go to every upstream at start and then every
//     LoopCheckInterval, so that a loop made later is found, and one that was
//     fixed ends by itself.
//
// CoreDNS's loop plugin stops the whole server when it finds a loop. Here the
// looping upstream is no longer asked, /healthz fails and the log says so
// every minute until a probe no longer comes back.
type loopDetector struct {
	probing atomic.Int32 // probes in flight: only then are names looked up

	mu     sync.Mutex
	probes map[string]*loopProbe // lower-case FQDN -> the probe
}

type loopProbe struct {
	u    *upstream
	seen atomic.Bool
}

// tag sets q's loop option to our nonce and the index of the upstream it is
// sent to, so that, should it come back, isLoop knows which upstream is us.
func (l *loopDetector) tag(q *dns.Msg, nonce [8]byte, i int) {
	opt := q.IsEdns0()
	opt.Option = []dns.EDNS0{&dns.EDNS0_LOCAL{Code: loopOption, Data: append(nonce[:], byte(i))}}
}

// isLoop reports whether req is one we forwarded (it carries our nonce) or a
// loop probe, and if so marks the upstream that brought it back. It runs for
// every query, so the common case costs a look at the OPT record.
func (f *forwarder) isLoop(req *dns.Msg) bool {
	if opt := req.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			l, ok := o.(*dns.EDNS0_LOCAL)
			if !ok || l.Code != loopOption || len(l.Data) != len(f.nonce)+1 || string(l.Data[:len(f.nonce)]) != string(f.nonce[:]) {
				continue
			}
			if i := int(l.Data[len(f.nonce)]); i < len(f.upstreams) {
				f.markLooping(f.upstreams[i], "forwarding loop: upstream sends our queries back to us; not forwarding to it")
			}
			return true
		}
	}
	if f.loops.probing.Load() == 0 || len(req.Question) != 1 {
		return false
	}
	f.loops.mu.Lock()
	p := f.loops.probes[strings.ToLower(dns.Fqdn(req.Question[0].Name))]
	f.loops.mu.Unlock()
	if p == nil {
		return false
	}
	p.seen.Store(true)
	f.markLooping(p.u, "forwarding loop: upstream sends our queries back to us; not forwarding to it")
	return true
}

// probeLoop sends u a question for a random name and reports whether it came
// back to us before u answered (or the exchange timed out).
func (f *forwarder) probeLoop(ctx context.Context, u *upstream) bool {
	var r [16]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf("%d.%d.", binary.BigEndian.Uint64(r[:8])>>1, binary.BigEndian.Uint64(r[8:])>>1)
	p := &loopProbe{u: u}
	f.loops.mu.Lock()
	if f.loops.probes == nil {
		f.loops.probes = make(map[string]*loopProbe)
	}
	f.loops.probes[name] = p
	f.loops.mu.Unlock()
	f.loops.probing.Add(1)
	defer func() {
		f.loops.probing.Add(-1)
		f.loops.mu.Lock()
		delete(f.loops.probes, name)
		f.loops.mu.Unlock()
	}()

	q := new(dns.Msg).SetQuestion(name, dns.TypeHINFO)
	q.Id = dns.Id()
	pctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	_, _, _ = f.udp.ExchangeContext(pctx, q, u.addr) // the answer does not matter
	return p.seen.Load()
}

// recheckLoops probes every upstream (except our own socket): one that
// loops is no longer asked, one known to loop whose probe no longer comes
// back is asked again. A loop made while we run (a resolver reconfigured to
// forward to us) is found within one interval, as one at start is at once.
func (f *forwarder) recheckLoops(ctx context.Context) {
	for _, u := range f.upstreams {
		if u.self {
			continue
		}
		was := u.looping.Load()
		if !f.probeLoop(ctx, u) && was && ctx.Err() == nil {
			u.looping.Store(false)
			f.log.Info("forwarding loop gone: forwarding to upstream again", "upstream", u.addr)
		}
	}
}

func (f *forwarder) markLooping(u *upstream, msg string) {
	if !u.looping.Swap(true) {
		f.metrics.loops.Inc()
		f.log.Error(msg, "upstream", u.addr)
	}
}

// looping returns the upstreams known to loop.
func (f *forwarder) looping() []string {
	var out []string
	for _, u := range f.upstreams {
		if u.looping.Load() {
			out = append(out, u.addr)
		}
	}
	return out
}
