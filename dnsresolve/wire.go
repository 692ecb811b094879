package dnsresolve

import (
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// This file answers most questions from answers kept encoded, without a
// dns.Msg: the records after the question are packed once, and a query
// costs a copy into a reused buffer, the header and the question written
// around them. That takes the garbage collector, which made the tail of the
// latency on a loaded machine (docs/benchmarks.md), out of the answer.
//
//   - The cluster zone's answers are packed per name and type, on the first
//     question for them, and kept by the Index (which is replaced whole with
//     every Snapshot, so nothing goes stale); an owner name equal to the
//     question is a compression pointer to it (offset 12), so the client's
//     spelling of the name (DNS 0x20) carries over to the records for free.
//     Negative answers (NXDOMAIN, NODATA) are the zone's SOA whatever the
//     name: one encoding each per Index, which is why a name that does not
//     exist, the most common question a pod's search path asks, costs no
//     entry.
//   - Forwarded answers are kept packed beside the cached dns.Msg
//     (cache.go), with the offsets of their TTLs, which a hit lowers by the
//     time the answer spent in the cache.
//
// What does not fit takes the dns.Msg path of handler.go, which gives the
// same answers: a question with EDNS options of ours or an EDNS version
// other than 0, a class other than IN, an ExternalName's CNAME (chased), a
// name under pod.<zone> (any address spells one: nothing to keep), a name
// with escapes, an answer too large for the client (truncated), a forwarded
// question not in the cache, and query logging.

// wire is one answer of the zone, kept encoded: its records, packed, and
// what the header says of them.
type wire struct {
	rcode      int
	an, ns, ar uint16
	rrs        []byte // answer, authority and additional records, in order
	// shuffle: a section has two address (or MX) records, which the
	// loadbalance plugin would reorder: such an answer takes the dns.Msg
	// path when it is on.
	shuffle bool
}

// headerLen is a DNS header's size; the question starts right after it.
const headerLen = 12

// pointerToQuestion is a compression pointer to offset 12, the question's name.
var pointerToQuestion = []byte{0xC0, headerLen}

// encode packs r's records; those owned by qname (lower-case, as the
// Index's records are) name it with a pointer to the question.
func encode(r Result, qname string) (*wire, error) {
	w := &wire{rcode: r.Rcode, an: uint16(len(r.Answer)), ns: uint16(len(r.Ns)), ar: uint16(len(r.Extra)),
		shuffle: shuffles(r.Answer) || shuffles(r.Ns) || shuffles(r.Extra)}
	for _, section := range [][]dns.RR{r.Answer, r.Ns, r.Extra} {
		for _, rr := range section {
			b := make([]byte, dns.Len(rr))
			n, err := dns.PackRR(rr, b, 0, nil, false)
			if err != nil {
				return nil, err
			}
			b = b[:n]
			if rr.Header().Name == qname {
				// The owner name is packed first, uncompressed: as
				// long as qname itself.
				w.rrs = append(append(w.rrs, pointerToQuestion...), b[len(qname)+1:]...)
				continue
			}
			w.rrs = append(w.rrs, b...)
		}
	}
	return w, nil
}

// shuffles reports whether roundRobin would reorder a section: two address
// records, or two MX.
func shuffles(rrs []dns.RR) bool {
	addrs, mx := 0, 0
	for _, rr := range rrs {
		switch rr.Header().Rrtype {
		case dns.TypeA, dns.TypeAAAA:
			addrs++
		case dns.TypeMX:
			mx++
		}
	}
	return addrs > 1 || mx > 1
}

// appendMsg writes the answer to req into dst (its length is where the
// message starts): the header (req's ID, RD and CD; authoritative; RA when
// the server forwards), req's question as the client spelled it, the
// records, and our OPT record when req had one (RFC 6891: only then).
func (w *wire) appendMsg(dst []byte, req *dns.Msg, ra bool) ([]byte, error) {
	q := req.Question[0]
	opt := req.IsEdns0()
	start := len(dst)
	dst = grow(dst, headerLen+len(q.Name)+1+4+len(w.rrs)+optLen)
	b := dst[start:]
	flags := uint16(1<<15 | 1<<10 | w.rcode&0xF) // QR, AA, RCODE
	if req.RecursionDesired {
		flags |= 1 << 8
	}
	if ra {
		flags |= 1 << 7
	}
	if req.CheckingDisabled {
		flags |= 1 << 4
	}
	ar := w.ar
	if opt != nil {
		ar++
	}
	binary.BigEndian.PutUint16(b[0:], req.Id)
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint16(b[4:], 1)
	binary.BigEndian.PutUint16(b[6:], w.an)
	binary.BigEndian.PutUint16(b[8:], w.ns)
	binary.BigEndian.PutUint16(b[10:], ar)
	off, err := dns.PackDomainName(q.Name, b, headerLen, nil, false)
	if err != nil {
		return dst[:start], err
	}
	binary.BigEndian.PutUint16(b[off:], q.Qtype)
	binary.BigEndian.PutUint16(b[off+2:], q.Qclass)
	off += 4
	off += copy(b[off:], w.rrs)
	if opt != nil {
		off += putOPT(b[off:], opt.Do())
	}
	return dst[:start+off], nil
}

// optLen is the size of our OPT record: the root name, type, class (the
// UDP size), TTL (extended RCODE, version, flags) and an empty RDATA.
const optLen = 1 + 2 + 2 + 4 + 2

// putOPT writes our OPT record into b (at least optLen long): the buffer
// size we advertise, version 0, DO as the client asked.
func putOPT(b []byte, do bool) int {
	b[0] = 0 // root
	binary.BigEndian.PutUint16(b[1:], dns.TypeOPT)
	binary.BigEndian.PutUint16(b[3:], serverUDPSize)
	var ttl uint32
	if do {
		ttl = 1 << 15
	}
	binary.BigEndian.PutUint32(b[5:], ttl)
	binary.BigEndian.PutUint16(b[9:], 0)
	return optLen
}

// grow extends b by n bytes, in place when its capacity allows.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// wires holds an Index's encoded positive answers (and the negative ones
// of names it has), by lower-case name and type, filled as questions come.
// Its size is bounded by the Index's names (maxWires): past that, answers
// are encoded for the question and not kept.
type wires struct {
	mu sync.RWMutex
	m  map[wireKey]*wire
}

type wireKey struct {
	name  string
	qtype uint16
}

func (ws *wires) get(k wireKey) *wire {
	ws.mu.RLock()
	defer ws.mu.RUnlock()
	return ws.m[k]
}

func (ws *wires) put(k wireKey, w *wire, limit int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m == nil {
		ws.m = make(map[wireKey]*wire)
	}
	if len(ws.m) < limit {
		ws.m[k] = w
	}
}

// maxWires bounds the encoded answers an Index keeps: a few types for each
// of its names.
func (ix *Index) maxWires() int { return 4*len(ix.names) + 1024 }

// negatives are the zone's two negative answers, the same for every name:
// its SOA in the authority section, with NXDOMAIN or without (NODATA).
type negatives struct {
	once           sync.Once
	nxdomain, none *wire
}

func (ix *Index) negative(rcode int) *wire {
	ix.neg.once.Do(func() {
		// The SOA is the zone's own record: it packs (encode cannot fail).
		ix.neg.nxdomain, _ = encode(Result{Rcode: dns.RcodeNameError, Ns: []dns.RR{ix.soa}}, "")
		ix.neg.none, _ = encode(Result{Ns: []dns.RR{ix.soa}}, "")
	})
	if rcode == dns.RcodeNameError {
		return ix.neg.nxdomain
	}
	return ix.neg.none
}

// errNotKept says the Index owns the question but its answer is not one to
// keep encoded: the dns.Msg path answers it.
var errNotKept = errors.New("answer not kept encoded")

// wire returns the encoded answer to a question for qname (any case) and
// qtype of class IN. ok is false when the name is not the Index's to
// answer (the forwarder's), as for Lookup; err is errNotKept when it is,
// but its answer takes the dns.Msg path.
func (ix *Index) wire(qname string, qtype uint16) (w *wire, ok bool, err error) {
	if strings.IndexByte(qname, '\\') >= 0 || !dns.IsFqdn(qname) {
		return nil, true, errNotKept
	}
	lname := strings.ToLower(qname) // no copy when it is already
	k := wireKey{lname, qtype}
	if w := ix.wires.get(k); w != nil {
		return w, true, nil
	}
	_, named := ix.names[lname]
	if !named && !strings.HasPrefix(lname, "_") && !ix.endpointParent(lname) {
		switch {
		case !under(lname, ix.zone):
			// A reverse zone's name of nothing has that zone's SOA (and
			// may fall through): the dns.Msg path.
			return nil, false, nil
		case under(lname, ix.podZone):
			return nil, true, errNotKept
		}
		// No such name: the one NXDOMAIN, and nothing kept for a name a
		// client made up.
		return ix.negative(dns.RcodeNameError), true, nil
	}
	r, ok := ix.Lookup(lname, qtype)
	if !ok {
		return nil, false, nil
	}
	if _, chase := soleCNAME(r.Answer); chase && qtype != dns.TypeCNAME && qtype != dns.TypeANY {
		return nil, true, errNotKept
	}
	if len(r.Answer) == 0 && len(r.Extra) == 0 && len(r.Ns) == 1 && r.Ns[0] == ix.soa {
		w = ix.negative(r.Rcode)
	} else if w, err = encode(r, lname); err != nil {
		return nil, true, err
	}
	if named || r.Rcode == dns.RcodeSuccess {
		// A name of the Index, or an SRV name of one of its Services:
		// bounded by the Index, so kept.
		ix.wires.put(k, w, ix.maxWires())
	}
	return w, true, nil
}

// endpointParent reports whether lname's parent is a ClusterIP Service's
// name held compactly: lname may be one of its endpoints' names, which
// Lookup answers (compact.go's endpointName).
func (ix *Index) endpointParent(lname string) bool {
	i, end := dns.NextLabel(lname, 0)
	if end {
		return false
	}
	e, ok := ix.names[lname[i:]]
	return ok && e.n == nil && !e.ptr
}

// under reports whether lname (lower-case, FQDN, no escapes) is zone or a
// name below it: dns.IsSubDomain without its label slices.
func under(lname, zone string) bool {
	if !strings.HasSuffix(lname, zone) {
		return false
	}
	i := len(lname) - len(zone)
	return i == 0 || zone == "." || lname[i-1] == '.'
}

// bufPool holds the buffers answers are written into; a *[]byte, so that
// Put does not allocate.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// answerEncoded answers req from an encoded answer when one fits (see the
// top of this file), and reports whether it did. start is when the query
// arrived, for the metrics.
func (s *Server) answerEncoded(w dns.ResponseWriter, req *dns.Msg, start time.Time) bool {
	if req.Response || req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 || s.logQueries {
		return false
	}
	opt := req.IsEdns0()
	if opt != nil && (opt.Version() != 0 || hasLoopOption(opt)) {
		return false
	}
	q := req.Question[0]
	ix := s.index.Load()
	if ix == nil || q.Qclass != dns.ClassINET || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR ||
		s.fwd.loops.probing.Load() != 0 {
		return false
	}
	udp := isUDP(w.RemoteAddr())
	limit := dns.MaxMsgSize
	if udp {
		limit = dns.MinMsgSize
		if opt != nil {
			limit = max(dns.MinMsgSize, int(opt.UDPSize()))
		}
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	var b []byte
	info := query{written: true, qtype: q.Qtype, tcp: !udp}
	enc, ours, err := ix.wire(q.Name, q.Qtype)
	switch {
	case err != nil:
		return false
	case ours:
		if (s.loadBalance && enc.shuffle) || (enc.rcode == dns.RcodeNameError && s.fallsThrough(q.Name)) {
			return false // the dns.Msg path shuffles, or forwards
		}
		if b, err = enc.appendMsg((*bp)[:0], req, len(s.fwd.upstreams) > 0); err != nil {
			return false
		}
		info.rcode = enc.rcode
	default:
		var shuffle bool
		if b, info.rcode, info.cacheHit, shuffle = s.cache.appendWire((*bp)[:0], req); info.cacheHit == cacheMissed ||
			(s.loadBalance && shuffle) {
			return false
		}
	}
	*bp = b[:0]
	if len(b) > limit {
		return false // truncation: the dns.Msg path
	}
	if _, err := w.Write(b); err != nil {
		s.log.Debug("write dns answer", "client", w.RemoteAddr(), "err", err)
		return true
	}
	info.took = time.Since(start)
	info.ip6 = isIPv6(w.RemoteAddr())
	info.do = opt != nil && opt.Do()
	info.inCache = s.cache.enabled(q.Name)
	info.reqLen, info.respLen = req.Len(), len(b)
	s.metrics.observe(&info)
	return true
}

// hasLoopOption reports whether opt carries the loop detector's option:
// maybe one of our own forwarded queries, which the dns.Msg path checks.
func hasLoopOption(opt *dns.OPT) bool {
	for _, o := range opt.Option {
		if o.Option() == loopOption {
			return true
		}
	}
	return false
}
