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

// CacheOptions are CoreDNS's cache plugin's options, for the forwarded
// answers (the Index's answers are never cached: they are current and as
// cheap to make as a cache hit).
type CacheOptions struct {
	// Zones whose answers are cached; nil or "." every name.
	Zones []string
	// SuccessCap answers (NOERROR with records) are kept, each for its
	// lowest TTL clamped into [SuccessMinTTL, SuccessTTL]; Denial* the same
	// for NXDOMAIN and NODATA (the SOA's TTL, capped by its minimum).
	SuccessCap, DenialCap     int
	SuccessTTL, SuccessMinTTL time.Duration
	DenialTTL, DenialMinTTL   time.Duration
	ServfailTTL               time.Duration // 0: SERVFAIL is not kept
	DisableSuccess            []string      // zones whose positive answers are not kept
	DisableDenial             []string      // zones whose negative answers are not kept
	KeepTTL                   bool          // answer with the TTLs as received
}

// legacyCache are the options clusterdns's flags mean: size entries of
// either kind, for their TTL, at most an hour; nothing kept with TTL 0.
func legacyCache(size int) *CacheOptions {
	return &CacheOptions{SuccessCap: size, DenialCap: size, SuccessTTL: maxCacheTTL, DenialTTL: maxCacheTTL}
}

// cache keeps upstream answers for as long as their TTLs allow, in two parts
// as CoreDNS's cache plugin: positive answers, and denials (NXDOMAIN, NODATA,
// SERVFAIL). Each part is small on purpose: a map under one mutex, and when
// full a random entry makes room (Go's map iteration order is random), which
// costs nothing to track.
type cache struct {
	now  func() time.Time
	opts CacheOptions

	// onEvict is told of each entry a full part pushed out: 0 success, 1
	// denial. nil: nobody.
	onEvict func(kind int)

	mu      sync.Mutex
	success map[cacheKey]cacheEntry
	denial  map[cacheKey]cacheEntry
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
	// shuffle: loadbalance would reorder it (wire.go's shuffles).
	shuffle bool
}

// cacheHit says which part of the cache answered.
type cacheHit int

const (
	cacheMissed cacheHit = iota
	cacheSuccess
	cacheDenial
)

func newCache(opts *CacheOptions, now func() time.Time) *cache {
	if now == nil {
		now = time.Now
	}
	return &cache{now: now, opts: *opts, success: make(map[cacheKey]cacheEntry), denial: make(map[cacheKey]cacheEntry)}
}

func keyOf(req *dns.Msg) cacheKey {
	q := req.Question[0]
	k := cacheKey{name: strings.ToLower(q.Name), qtype: q.Qtype, qclass: q.Qclass, cd: req.CheckingDisabled}
	if opt := req.IsEdns0(); opt != nil {
		k.do = opt.Do()
	}
	return k
}

// enabled reports whether answers to name are cached at all.
func (c *cache) enabled(name string) bool {
	if c.opts.SuccessCap <= 0 && c.opts.DenialCap <= 0 {
		return false
	}
	return inZones(c.opts.Zones, name)
}

// inZones reports whether name is under one of zones (nil: every name).
func inZones(zones []string, name string) bool {
	if zones == nil {
		return true
	}
	lname := dns.CanonicalName(name)
	for _, z := range zones {
		if dns.IsSubDomain(dns.CanonicalName(z), lname) {
			return true
		}
	}
	return false
}

// get returns a copy of the cached answer to req with its TTLs lowered by the
// time it spent in the cache (unless KeepTTL), and which part held it; nil
// and cacheMissed when it holds none.
func (c *cache) get(req *dns.Msg) (*dns.Msg, cacheHit) {
	if !c.enabled(req.Question[0].Name) {
		return nil, cacheMissed
	}
	k := keyOf(req)
	now := c.now()
	c.mu.Lock()
	hit := cacheSuccess
	e, ok := c.success[k]
	if !ok {
		hit = cacheDenial
		e, ok = c.denial[k]
	}
	if ok && !now.Before(e.expires) {
		delete(c.success, k)
		delete(c.denial, k)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return nil, cacheMissed
	}
	m := e.msg.Copy()
	if !c.opts.KeepTTL {
		age := uint32(now.Sub(e.stored) / time.Second)
		left := uint32(e.expires.Sub(now) / time.Second)
		for _, s := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
			for _, rr := range s {
				if h := rr.Header(); h.Rrtype != dns.TypeOPT {
					h.Ttl = min(h.Ttl-min(h.Ttl, age), left)
				}
			}
		}
	}
	m.Id = req.Id
	m.Question = req.Question // the client's spelling of the name
	return m, hit
}

// put stores resp, the answer to req, if it may be cached: NOERROR and
// NXDOMAIN (a denial with an SOA), SERVFAIL when ServfailTTL is set; not
// truncated, not in a disabled zone, and kept for a time above zero. It
// lowers resp's TTLs to that time.
func (c *cache) put(req, resp *dns.Msg) {
	name := req.Question[0].Name
	if !c.enabled(name) || resp.Truncated {
		return
	}
	var keep time.Duration
	denial := true
	switch {
	case resp.Rcode == dns.RcodeServerFailure:
		keep = c.opts.ServfailTTL
	case resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError:
		return
	default:
		ttl, ok := cacheTTL(resp)
		if !ok {
			return
		}
		denial = resp.Rcode == dns.RcodeNameError || len(resp.Answer) == 0
		lo, hi := c.opts.SuccessMinTTL, c.opts.SuccessTTL
		if denial {
			lo, hi = c.opts.DenialMinTTL, c.opts.DenialTTL
		}
		keep = min(max(time.Duration(ttl)*time.Second, lo), hi)
	}
	// CoreDNS's cache caps the TTLs of every answer it passes at the time it
	// would keep it, cached or not: no record outlives its cache entry.
	capTTLs(resp, keep)
	capacity, disabled := c.opts.SuccessCap, c.opts.DisableSuccess
	if denial {
		capacity, disabled = c.opts.DenialCap, c.opts.DisableDenial
	}
	if keep <= 0 || capacity <= 0 || (disabled != nil && inZones(disabled, name)) {
		return
	}
	now := c.now()
	e := cacheEntry{msg: resp.Copy(), stored: now, expires: now.Add(keep)}
	e.wire, e.ttls = packForCache(e.msg)
	e.shuffle = shuffles(resp.Answer) || shuffles(resp.Ns) || shuffles(resp.Extra)
	k := keyOf(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	part, other, kind := c.success, c.denial, 0
	if denial {
		part, other, kind = c.denial, c.success, 1
	}
	delete(other, k) // an answer replaces its opposite
	if _, exists := part[k]; !exists && len(part) >= capacity {
		for victim := range part {
			delete(part, victim)
			if c.onEvict != nil {
				c.onEvict(kind)
			}
			break
		}
	}
	part[k] = e
}

// capTTLs lowers every TTL of m above keep to keep (CoreDNS's
// filterRRSlice).
func capTTLs(m *dns.Msg, keep time.Duration) {
	ttl := uint32(keep / time.Second)
	if keep <= 0 {
		return
	}
	for _, s := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range s {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT && h.Ttl > ttl {
				h.Ttl = ttl
			}
		}
	}
}

// lens are the entries of each part, expired ones included.
func (c *cache) lens() (success, denial int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.success), len(c.denial)
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
// the TTLs lowered by the time it spent in the cache (not with KeepTTL),
// our OPT when req had one. hit says which part held it: cacheMissed when
// none does, or it is not kept packed; shuffle whether loadbalance would
// reorder it.
func (c *cache) appendWire(dst []byte, req *dns.Msg) (b []byte, rcode int, hit cacheHit, shuffle bool) {
	if !c.enabled(req.Question[0].Name) {
		return dst, 0, cacheMissed, false
	}
	k := keyOf(req)
	now := c.now()
	c.mu.Lock()
	hit = cacheSuccess
	e, ok := c.success[k]
	if !ok {
		hit = cacheDenial
		e, ok = c.denial[k]
	}
	c.mu.Unlock()
	if !ok || !now.Before(e.expires) || e.wire == nil {
		return dst, 0, cacheMissed, false // get deletes what expired
	}
	start := len(dst)
	dst = append(dst, e.wire...)
	m := dst[start:]
	binary.BigEndian.PutUint16(m[0:], req.Id)
	q := req.Question[0]
	end, err := dns.PackDomainName(q.Name, m, headerLen, nil, false)
	if err != nil || end+4 > len(m) || binary.BigEndian.Uint16(m[end:]) != q.Qtype {
		return dst[:start], 0, cacheMissed, false // a name spelled to another length: escapes
	}
	if !c.opts.KeepTTL {
		age := uint32(now.Sub(e.stored) / time.Second)
		left := uint32(e.expires.Sub(now) / time.Second)
		for _, at := range e.ttls {
			ttl := binary.BigEndian.Uint32(m[at:])
			binary.BigEndian.PutUint32(m[at:], min(ttl-min(ttl, age), left))
		}
	}
	if opt := req.IsEdns0(); opt != nil {
		binary.BigEndian.PutUint16(m[10:], binary.BigEndian.Uint16(m[10:])+1)
		n := len(dst)
		dst = grow(dst, optLen)
		putOPT(dst[n:], opt.Do())
	}
	return dst, e.msg.Rcode, hit, e.shuffle
}
