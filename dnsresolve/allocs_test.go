package dnsresolve

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/miekg/dns"
)

// The allocations of one answered query, measured at the handler: what
// ServeDNS costs beyond what miekg/dns's server spends on the message
// itself (reading the datagram, unpacking the question, the writer). The
// kinds are what a pod's queries are made of: a Service's A, its AAAA (NODATA: the Service has
// no IPv6 address), its SRV, a name of the zone that does not exist
// (NXDOMAIN: a pod's search path makes most questions such), and a name
// outside the zone that the forwarder's cache answers.

// allocQueries are the questions measured, with the answer each must get.
var allocQueries = []struct {
	kind  string
	name  string
	qtype uint16
	rcode int
	n     int // answer records
}{
	{"A", "svc-01234.ns-34.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, 1},
	{"AAAA", "svc-01234.ns-34.svc.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess, 0},
	{"SRV", "_http._tcp.svc-01234.ns-34.svc.cluster.local.", dns.TypeSRV, dns.RcodeSuccess, 1},
	{"NXDOMAIN", "svc-01234.ns-34.svc.cluster.local.ns-01.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, 0},
	{"forwarded", "example.org.", dns.TypeA, dns.RcodeSuccess, 1},
}

// allocServer is a Server with 20,000 Services and an upstream for
// example.org whose answer is already cached.
func allocServer(tb testing.TB) *Server {
	tb.Helper()
	up := startUpstream(tb, answerA)
	s, err := New(Config{TTL: 5, Upstreams: []string{up.addr}})
	if err != nil {
		tb.Fatal(err)
	}
	s.Update(manyServices(20000))
	return s
}

// packetWriter is a UDP ResponseWriter that keeps the last answer in a
// buffer it reuses, as the server's socket writer hands it to the kernel,
// and has its client's address at hand, as miekg/dns's writer has it in
// its session.
type packetWriter struct {
	recorder
	buf []byte
}

var clientAddr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}

func (w *packetWriter) RemoteAddr() net.Addr { return clientAddr }

func (w *packetWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.PackBuffer(w.buf)
	w.buf = b[:0]
	w.packed = b
	return err
}

func (w *packetWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf[:0], b...)
	w.packed = w.buf
	return len(b), nil
}

// check unpacks the last answer and compares it with q's expectations.
func (w *packetWriter) check(req *dns.Msg, rcode, n int) error {
	m := new(dns.Msg)
	if err := m.Unpack(w.packed); err != nil {
		return err
	}
	if m.Id != req.Id || m.Rcode != rcode || len(m.Answer) != n || len(m.Question) != 1 || m.Question[0] != req.Question[0] {
		return fmt.Errorf("answer %v, want id %d, rcode %s, %d records", m, req.Id, dns.RcodeToString[rcode], n)
	}
	return nil
}

// TestAllocsPerAnswer counts each kind's allocations (testing.AllocsPerRun):
// none, since answers are kept encoded (wire.go). The race detector's
// instrumentation allocates on its own: there the counts are only logged.
func TestAllocsPerAnswer(t *testing.T) {
	s := allocServer(t)
	for _, q := range allocQueries {
		req := question(q.name, q.qtype)
		req.SetEdns0(1232, false)
		w := &packetWriter{}
		s.ServeDNS(w, req) // the forwarder's cache, the encoded answers: filled
		if err := w.check(req, q.rcode, q.n); err != nil {
			t.Fatalf("%s: %v", q.kind, err)
		}
		allocs := testing.AllocsPerRun(200, func() { s.ServeDNS(w, req) })
		t.Logf("%-9s %4.0f allocations per answer", q.kind, allocs)
		if allocs > 0 && !raceEnabled {
			t.Errorf("%s: %.0f allocations per answer, want none", q.kind, allocs)
		}
	}
}

// BenchmarkAnswer is each kind through the handler, its allocations
// reported (go test -bench Answer -benchmem).
func BenchmarkAnswer(b *testing.B) {
	s := allocServer(b)
	for _, q := range allocQueries {
		b.Run(q.kind, func(b *testing.B) {
			req := question(q.name, q.qtype)
			req.SetEdns0(1232, false)
			w := &packetWriter{}
			s.ServeDNS(w, req)
			if err := w.check(req, q.rcode, q.n); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				s.ServeDNS(w, req)
			}
		})
	}
}

// serveOn serves s on listen until the test ends and returns the address
// a client on loopback asks.
func serveOn(tb testing.TB, s *Server, listen string) string {
	tb.Helper()
	pc, ln, err := Listen(listen)
	if err != nil {
		tb.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, ln) }()
	tb.Cleanup(func() { cancel(); <-done })
	return net.JoinHostPort("127.0.0.1", port)
}

// udpExchange returns a function that asks req at addr over UDP and reads
// its answer, one at a time, as a stub resolver does.
func udpExchange(tb testing.TB, addr string, req *dns.Msg) func() {
	tb.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	query, err := req.Pack()
	if err != nil {
		tb.Fatal(err)
	}
	ans := make([]byte, serverUDPSize)
	return func() {
		if _, err := c.Write(query); err != nil {
			tb.Fatal(err)
		}
		if _, err := c.Read(ans); err != nil {
			tb.Fatal(err)
		}
	}
}

// serverListens are the two ways the server's UDP socket is bound: to one
// address, and to every address (clusterdns's default, ":53"), where each
// answer must leave from the address its query was sent to (udp.go).
var serverListens = []string{"127.0.0.1:0", ":0"}

// maxServerAllocs is what a query over UDP with an OPT record costs the
// whole server, all of it miekg/dns's: the goroutine it starts per query,
// its ResponseWriter, the dns.Msg the query is unpacked into, the
// question's slice and name, and the additional section's slice, OPT
// record and header. The handler allocates nothing.
const maxServerAllocs = 8

// TestAllocsPerQuery counts the allocations of one query through the
// whole server on a real UDP socket (testing.AllocsPerRun counts the
// process's, the client's reads and writes too, which allocate nothing).
func TestAllocsPerQuery(t *testing.T) {
	for _, listen := range serverListens {
		s := allocServer(t)
		addr := serveOn(t, s, listen)
		for _, q := range allocQueries {
			req := question(q.name, q.qtype)
			req.SetEdns0(1232, false)
			exchange := udpExchange(t, addr, req)
			exchange() // the caches filled
			// The least of three counts: AllocsPerRun counts the whole
			// process's, and the server's background work (the loop
			// probe it sends its upstreams on start) allocates too.
			allocs := testing.AllocsPerRun(200, exchange)
			for range 2 {
				allocs = min(allocs, testing.AllocsPerRun(200, exchange))
			}
			t.Logf("listen %-11s %-9s %4.0f allocations per query", listen, q.kind, allocs)
			if allocs > maxServerAllocs && !raceEnabled {
				t.Errorf("listen %s, %s: %.0f allocations per query, want at most %d (miekg/dns's)", listen, q.kind, allocs, maxServerAllocs)
			}
		}
	}
}

// BenchmarkServerUDP is the whole server on a loopback UDP socket: one
// question written, its answer read, one at a time. Its allocs/op are the
// process's: miekg/dns's share (maxServerAllocs) with the handler's none.
func BenchmarkServerUDP(b *testing.B) {
	for _, listen := range serverListens {
		s := allocServer(b)
		addr := serveOn(b, s, listen)
		for _, q := range allocQueries {
			b.Run(listen+"/"+q.kind, func(b *testing.B) {
				req := question(q.name, q.qtype)
				req.SetEdns0(1232, false)
				exchange := udpExchange(b, addr, req)
				exchange() // the caches filled
				b.ReportAllocs()
				for b.Loop() {
					exchange()
				}
			})
		}
	}
}
