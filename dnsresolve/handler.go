package dnsresolve

import (
	"context"
	"errors"
	"net"
	"slices"
	"time"

	"github.com/miekg/dns"
)

// ServeDNS answers one query: it is the dns.Handler the UDP and TCP servers
// call, once per message, concurrently.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	start := time.Now()
	if s.answerEncoded(w, req, start) {
		return // most answers: kept encoded (wire.go)
	}
	resp := s.answer(context.Background(), req)
	if resp == nil {
		return // not a question: no answer, so nothing to amplify
	}
	_, udp := w.RemoteAddr().(*net.UDPAddr)
	s.fit(resp, req, udp)
	if err := w.WriteMsg(resp); err != nil {
		s.log.Debug("write dns answer", "client", w.RemoteAddr(), "err", err)
		return
	}
	var q dns.Question
	if len(req.Question) > 0 {
		q = req.Question[0]
	}
	took := time.Since(start)
	s.metrics.observe(q.Qtype, resp.Rcode, took)
	if s.logQueries {
		s.log.Info("query", "client", w.RemoteAddr().String(), "name", q.Name, "type", dns.TypeToString[q.Qtype],
			"rcode", rcodeLabel(resp.Rcode), "duration", took)
	}
}

// answer returns the response to req, or nil when req must not be answered.
func (s *Server) answer(ctx context.Context, req *dns.Msg) *dns.Msg {
	if req.Response {
		return nil
	}
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = len(s.fwd.upstreams) > 0
	switch {
	case req.Opcode != dns.OpcodeQuery:
		return rcode(m, dns.RcodeNotImplemented)
	case len(req.Question) != 1:
		return rcode(m, dns.RcodeFormatError)
	}
	if opt := req.IsEdns0(); opt != nil && opt.Version() != 0 {
		return rcode(m, dns.RcodeBadVers) // RFC 6891 6.1.3; fit adds the OPT it needs
	}
	if s.fwd.isLoop(req) {
		// Our own forwarded query came back: answering stops the loop, and the
		// forwarder, seeing SERVFAIL, moves on to its next upstream.
		return rcode(m, dns.RcodeServerFailure)
	}

	q := req.Question[0]
	if q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		return rcode(m, dns.RcodeRefused) // no zone transfers of the cluster
	}
	ix := s.index.Load()
	if q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY {
		if s.inZone(q.Name) {
			return rcode(m, dns.RcodeRefused)
		}
		return s.forward(ctx, req, m)
	}
	if ix == nil {
		if s.inZone(q.Name) {
			return rcode(m, dns.RcodeServerFailure) // not ready: no Snapshot yet
		}
	} else if r, ok := ix.Lookup(q.Name, q.Qtype); ok {
		m.Authoritative = true
		m.Rcode = r.Rcode
		// Clip: later appends (chasing, OPT) must not write into the Index.
		m.Answer, m.Ns, m.Extra = slices.Clip(r.Answer), slices.Clip(r.Ns), slices.Clip(r.Extra)
		if cname, ok := soleCNAME(m.Answer); ok && q.Qtype != dns.TypeCNAME && q.Qtype != dns.TypeANY {
			s.chase(ctx, ix, req, m, cname.Target)
		}
		return m
	}
	return s.forward(ctx, req, m)
}

// inZone reports whether name is the cluster's zone or under it. Only the
// questions the Index does not answer ask it: dns.IsSubDomain splits both
// names into labels, a slice per question, and a question answered from
// the Index learns it there for free.
func (s *Server) inZone(name string) bool {
	return dns.IsSubDomain(s.zone, dns.CanonicalName(name))
}

// forward answers req through the upstreams; m is the reply prepared so far.
func (s *Server) forward(ctx context.Context, req, m *dns.Msg) *dns.Msg {
	if len(s.fwd.upstreams) == 0 {
		return rcode(m, dns.RcodeRefused)
	}
	resp, err := s.fwd.forward(ctx, req)
	if errors.Is(err, errMaxConcurrent) {
		return rcode(m, dns.RcodeRefused) // as CoreDNS's max_concurrent does
	}
	if err != nil {
		s.log.Debug("forward", "name", req.Question[0].Name, "err", err)
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
	if resp, err := s.fwd.forward(ctx, sub); err == nil && resp.Rcode == dns.RcodeSuccess {
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
