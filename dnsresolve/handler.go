package dnsresolve

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// ServeDNS answers one query: it is the dns.Handler the UDP and TCP servers
// call, once per message, concurrently.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	start := time.Now()
	if q, ok := w.RemoteAddr().(*udpSession); ok {
		defer q.release() // answered: its buffer is free (udp.go)
	}
	if s.answerEncoded(w, req, start) {
		return // most answers: kept encoded (wire.go)
	}
	info := query{written: true}
	resp := s.answer(context.Background(), req, &info)
	if resp == nil {
		return // not a question: no answer, so nothing to amplify
	}
	if s.loadBalance {
		roundRobin(resp)
	}
	remote := w.RemoteAddr()
	udp := isUDP(remote)
	s.fit(resp, req, udp)
	var q dns.Question
	if len(req.Question) > 0 {
		q = req.Question[0]
	}
	if s.logQueries {
		// Before the answer leaves: whoever reads the log once the client
		// has its answer (a lab's step) finds the line there.
		s.log.Info("query", "client", remote.String(), "name", q.Name, "type", dns.TypeToString[q.Qtype],
			"rcode", rcodeLabel(resp.Rcode), "duration", time.Since(start))
	}
	if err := w.WriteMsg(resp); err != nil {
		s.log.Debug("write dns answer", "client", remote, "err", err)
		return
	}
	info.inCache = q.Name != "" && s.cache.enabled(q.Name)
	info.qtype, info.tcp, info.ip6, info.rcode, info.took = q.Qtype, !udp, isIPv6(remote), resp.Rcode, time.Since(start)
	if opt := req.IsEdns0(); opt != nil {
		info.do = opt.Do()
	}
	info.reqLen, info.respLen = req.Len(), resp.Len()
	s.metrics.observe(&info)
}

// answer returns the response to req, or nil when req must not be answered.
// It tells info whether an answer was written by a plugin, as CoreDNS would
// have it (an error answer is not), and whether the cache held it.
func (s *Server) answer(ctx context.Context, req *dns.Msg, info *query) *dns.Msg {
	if req.Response {
		return nil
	}
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = len(s.fwd.upstreams) > 0
	switch {
	case req.Opcode != dns.OpcodeQuery:
		info.written = false
		return rcode(m, dns.RcodeNotImplemented)
	case len(req.Question) != 1:
		info.written = false
		return rcode(m, dns.RcodeFormatError)
	}
	if opt := req.IsEdns0(); opt != nil && opt.Version() != 0 {
		return rcode(m, dns.RcodeBadVers) // RFC 6891 6.1.3; fit adds the OPT it needs
	}
	if s.fwd.isLoop(req) {
		// Our own forwarded query came back: answering stops the loop, and the
		// forwarder, seeing SERVFAIL, moves on to its next upstream.
		info.written = false
		return rcode(m, dns.RcodeServerFailure)
	}

	q := req.Question[0]
	if q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		info.written = false
		return rcode(m, dns.RcodeRefused) // no zone transfers of the cluster
	}
	ix := s.index.Load()
	if q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY {
		if s.inZone(q.Name) {
			info.written = false
			return rcode(m, dns.RcodeRefused)
		}
		return s.forward(ctx, req, m, info)
	}
	if ix == nil {
		if s.inZone(q.Name) || (s.inReverseZone(q.Name) && !s.fallsThrough(q.Name)) {
			return rcode(m, dns.RcodeServerFailure) // not ready: no Snapshot yet
		}
	} else if r, ok := ix.Lookup(q.Name, q.Qtype); ok && !(r.Rcode == dns.RcodeNameError && s.fallsThrough(q.Name)) {
		m.Authoritative = true
		m.Rcode = r.Rcode
		// Clip: later appends (chasing, OPT) must not write into the Index.
		m.Answer, m.Ns, m.Extra = slices.Clip(r.Answer), slices.Clip(r.Ns), slices.Clip(r.Extra)
		if cname, ok := soleCNAME(m.Answer); ok && q.Qtype != dns.TypeCNAME && q.Qtype != dns.TypeANY {
			s.chase(ctx, ix, req, m, cname.Target)
		}
		return m
	}
	return s.forward(ctx, req, m, info)
}

// inZone reports whether name is the cluster's zone or under it. Only the
// questions the Index does not answer ask it: dns.IsSubDomain splits both
// names into labels, a slice per question, and a question answered from
// the Index learns it there for free.
func (s *Server) inZone(name string) bool {
	return dns.IsSubDomain(s.zone, dns.CanonicalName(name))
}

// fallsThrough reports whether a name the Index does not have goes to the
// upstreams (the kubernetes plugin's fallthrough zones). It allocates nothing
// for a name in lower case: it is asked on the encoded path's NXDOMAIN.
func (s *Server) fallsThrough(name string) bool {
	return inAnyZone(s.fallZones, name)
}

// inReverseZone reports whether name is in one of the reverse zones the
// Index answers for.
func (s *Server) inReverseZone(name string) bool {
	zones := s.reverseZones
	if zones == nil {
		zones = defaultReverseZones
	}
	return inAnyZone(zones, name)
}

// inAnyZone reports whether name (any case, FQDN or not) is one of zones
// (lower-case FQDNs) or under it.
func inAnyZone(zones []string, name string) bool {
	if len(zones) == 0 {
		return false
	}
	lname := strings.ToLower(name) // no copy when it is already
	if !dns.IsFqdn(lname) {
		lname += "."
	}
	for _, z := range zones {
		if under(lname, z) {
			return true
		}
	}
	return false
}

// forward answers req through the upstreams; m is the reply prepared so far.
func (s *Server) forward(ctx context.Context, req, m *dns.Msg, info *query) *dns.Msg {
	if len(s.fwd.upstreams) == 0 {
		info.written = false
		return rcode(m, dns.RcodeRefused)
	}
	if !s.fwd.opts.forwards(req.Question[0].Name) {
		info.written = false
		return rcode(m, dns.RcodeServerFailure) // no plugin takes it: CoreDNS's "no next plugin found"
	}
	resp, hit, err := s.fwd.forward(ctx, req)
	info.cacheHit = hit
	if errors.Is(err, errMaxConcurrent) {
		info.written = false
		return rcode(m, dns.RcodeRefused) // as CoreDNS's max_concurrent does
	}
	if err != nil {
		q := req.Question[0]
		if s.logErrors { // CoreDNS's errors plugin: "2 name. A: err"
			s.log.Error("query failed", "rcode", dns.RcodeServerFailure, "name", q.Name, "type", dns.TypeToString[q.Qtype], "err", err)
		} else {
			s.log.Debug("forward", "name", q.Name, "err", err)
		}
		info.written = false
		return rcode(m, dns.RcodeServerFailure)
	}
	return resp
}

// chase follows an ExternalName's CNAME once, so that a stub resolver (glibc
// does not follow CNAMEs itself) gets addresses: from the Index when the
// target is in the zone, else from an upstream. If that fails the CNAME alone
// is the answer, and a resolver may follow it.
func (s *Server) chase(ctx context.Context, ix *Index, req, m *dns.Msg, target string) {
	q := req.Question[0]
	if ix.InZone(target) {
		if r, ok := ix.Lookup(target, q.Qtype); ok && r.Rcode == dns.RcodeSuccess {
			if _, again := soleCNAME(r.Answer); !again {
				m.Answer = append(m.Answer, r.Answer...)
			}
		}
		return
	}
	if len(s.fwd.upstreams) == 0 {
		return
	}
	sub := new(dns.Msg)
	sub.SetQuestion(target, q.Qtype)
	if resp, _, err := s.fwd.forward(ctx, sub); err == nil && resp.Rcode == dns.RcodeSuccess {
		m.Answer = append(m.Answer, resp.Answer...)
		m.Authoritative = false // part of the answer is not ours
	}
}

func soleCNAME(rrs []dns.RR) (*dns.CNAME, bool) {
	if len(rrs) != 1 {
		return nil, false
	}
	c, ok := rrs[0].(*dns.CNAME)
	return c, ok
}

func rcode(m *dns.Msg, code int) *dns.Msg {
	m.Rcode = code
	m.Answer, m.Ns, m.Extra = nil, nil, nil
	return m
}

// fit adds our OPT record when the client sent one (RFC 6891: only then), and
// truncates the answer to what the client can receive: over UDP 512 bytes, or
// the buffer size in its OPT; over TCP 64 KiB. Truncate sets TC when records
// had to go, and the client asks again over TCP.
func (s *Server) fit(resp, req *dns.Msg, udp bool) {
	size := dns.MaxMsgSize
	if udp {
		size = dns.MinMsgSize
	}
	if opt := req.IsEdns0(); opt != nil {
		resp.Extra = slices.Clip(resp.Extra)
		resp.SetEdns0(serverUDPSize, opt.Do())
		if udp {
			size = max(dns.MinMsgSize, int(opt.UDPSize()))
		}
	}
	tc := resp.Truncated
	resp.Truncate(size)
	if resp.Truncated && !tc {
		s.metrics.truncated.Inc()
	}
}
