package dnsresolve

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
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
	// wire is msg packed without its OPT record, and ttls the offsets of
	// its records' TTLs: what appendWire answers from (wire.go). Nil when
	// msg did not pack.
	wire []byte
	ttls []int
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
	e.wire, e.ttls = packForCache(e.msg)
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

// packForCache packs an upstream's answer as appendWire serves it: without
// its OPT record (the Server adds its own), compressed, and the offsets of
// its records' TTLs. Nil when it does not pack or parse back.
func packForCache(m *dns.Msg) ([]byte, []int) {
	c := m.Copy()
	c.Extra = slices.DeleteFunc(c.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
	c.Compress = true
	b, err := c.Pack()
	if err != nil {
		return nil, nil
	}
	ttls, err := ttlOffsets(b)
	if err != nil {
		return nil, nil
	}
	return b, ttls
}

// ttlOffsets walks a packed message and returns where each record's TTL
// is: after its owner name (labels, or a compression pointer), type and
// class.
func ttlOffsets(b []byte) ([]int, error) {
	if len(b) < headerLen {
		return nil, errShortMessage
	}
	qd := int(binary.BigEndian.Uint16(b[4:]))
	rrs := int(binary.BigEndian.Uint16(b[6:])) + int(binary.BigEndian.Uint16(b[8:])) + int(binary.BigEndian.Uint16(b[10:]))
	off := headerLen
	var err error
	for range qd {
		if off, err = skipName(b, off); err != nil {
			return nil, err
		}
		off += 4
	}
	ttls := make([]int, 0, rrs)
	for range rrs {
		if off, err = skipName(b, off); err != nil {
			return nil, err
		}
		if off+10 > len(b) {
			return nil, errShortMessage
		}
		ttls = append(ttls, off+4)
		off += 10 + int(binary.BigEndian.Uint16(b[off+8:]))
	}
	if off != len(b) {
		return nil, errShortMessage
	}
	return ttls, nil
}

var errShortMessage = errors.New("dns message ends early")

// skipName returns the offset after the name at off.
func skipName(b []byte, off int) (int, error) {
	for off < len(b) {
		switch l := int(b[off]); {
		case l == 0:
			return off + 1, nil
		case l&0xC0 == 0xC0:
			return off + 2, nil
		default:
			off += 1 + l
		}
	}
	return 0, errShortMessage
}

// appendWire writes the cached answer to req into dst, as get and the
// Server's fit would make it: req's ID and question (the client's spelling),
// the TTLs lowered by the time it spent in the cache, our OPT when req had
// one. hit is false when there is none, or it is not kept packed.
func (c *cache) appendWire(dst []byte, req *dns.Msg) (b []byte, rcode int, hit bool) {
	if c.size <= 0 {
		return dst, 0, false
	}
	k := keyOf(req)
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	if !ok || !now.Before(e.expires) || e.wire == nil {
		return dst, 0, false // get deletes what expired
	}
	start := len(dst)
	dst = append(dst, e.wire...)
	m := dst[start:]
	binary.BigEndian.PutUint16(m[0:], req.Id)
	q := req.Question[0]
	end, err := dns.PackDomainName(q.Name, m, headerLen, nil, false)
	if err != nil || end+4 > len(m) || binary.BigEndian.Uint16(m[end:]) != q.Qtype {
		return dst[:start], 0, false // a name spelled to another length: escapes
	}
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, at := range e.ttls {
		ttl := binary.BigEndian.Uint32(m[at:])
		binary.BigEndian.PutUint32(m[at:], ttl-min(ttl, age))
	}
	if opt := req.IsEdns0(); opt != nil {
		binary.BigEndian.PutUint16(m[10:], binary.BigEndian.Uint16(m[10:])+1)
		n := len(dst)
		dst = grow(dst, optLen)
		putOPT(dst[n:], opt.Do())
	}
	return dst, e.msg.Rcode, true
}
