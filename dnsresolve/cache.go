package dnsresolve

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// maxCacheTTL caps how long an upstream answer is kept, whatever its TTL says
// (CoreDNS's cache plugin: 3600s for positive answers).
const maxCacheTTL = time.Hour

// cache keeps upstream answers for as long as their TTLs allow. It is small on
// purpose: a map under one mutex, and when full a random entry makes room (Go's
// map iteration order is random), which costs nothing to track.
type cache struct {
	now  func() time.Time
	size int

	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
}

type cacheKey struct {
	name   string // lower-case
	qtype  uint16
	qclass uint16
	do     bool // DNSSEC records were asked for
	// cd: the client asked the upstream not to validate (Checking Disabled):
	// such an answer may be bogus and must not reach a client that wants
	// validated data.
	cd bool
}

// flight is the key as a string, for singleflight.
func (k cacheKey) flight() string {
	return fmt.Sprintf("%s|%d|%d|%t|%t", k.name, k.qtype, k.qclass, k.do, k.cd)
}

type cacheEntry struct {
	msg     *dns.Msg
	stored  time.Time
	expires time.Time
}

func newCache(size int, now func() time.Time) *cache {
	if now == nil {
		now = time.Now
	}
	return &cache{now: now, size: size, entries: make(map[cacheKey]cacheEntry)}
}

func keyOf(req *dns.Msg) cacheKey {
	q := req.Question[0]
	k := cacheKey{name: strings.ToLower(q.Name), qtype: q.Qtype, qclass: q.Qclass, cd: req.CheckingDisabled}
	if opt := req.IsEdns0(); opt != nil {
		k.do = opt.Do()
	}
	return k
}

// get returns a copy of the cached answer to req with its TTLs lowered by the
// time it spent in the cache, or nil.
func (c *cache) get(req *dns.Msg) *dns.Msg {
	if c.size <= 0 {
		return nil
	}
	k := keyOf(req)
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[k]
	if ok && !now.Before(e.expires) {
		delete(c.entries, k)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return nil
	}
	m := e.msg.Copy()
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, s := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range s {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl -= min(h.Ttl, age)
			}
		}
	}
	m.Id = req.Id
	m.Question = req.Question // the client's spelling of the name
	return m
}

// put stores resp, the answer to req, if it may be cached: NOERROR or
// NXDOMAIN, not truncated, and with a TTL above zero.
func (c *cache) put(req, resp *dns.Msg) {
	if c.size <= 0 || resp.Truncated {
		return
	}
	if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		return
	}
	ttl, ok := cacheTTL(resp)
	if !ok || ttl == 0 {
		return
	}
	now := c.now()
	e := cacheEntry{msg: resp.Copy(), stored: now, expires: now.Add(min(time.Duration(ttl)*time.Second, maxCacheTTL))}
	k := keyOf(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, exists := c.entries[k]; !exists && len(c.entries) >= c.size {
		for victim := range c.entries {
			delete(c.entries, victim)
			break
		}
	}
	c.entries[k] = e
}

// len is the number of entries, expired ones included.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// cacheTTL is the lowest TTL of the answer's records; for a negative answer
// (NXDOMAIN or NODATA) the SOA's TTL capped by its minimum, as RFC 2308
// section 5 says. ok is false for a negative answer without SOA, which RFC 2308
// says not to cache.
func cacheTTL(m *dns.Msg) (ttl uint32, ok bool) {
	if len(m.Answer) == 0 {
		for _, rr := range m.Ns {
			if soa, isSOA := rr.(*dns.SOA); isSOA {
				return min(soa.Hdr.Ttl, soa.Minttl), true
			}
		}
		return 0, false
	}
	ttl = ^uint32(0)
	for _, s := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range s {
			ttl = min(ttl, rr.Header().Ttl)
		}
	}
	return ttl, true
}
