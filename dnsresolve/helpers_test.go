package dnsresolve

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a dns.ResponseWriter that keeps what the handler wrote, packed
// and unpacked again, as a client would see it.
type recorder struct {
	udp    bool
	msg    *dns.Msg
	packed []byte
}

func (r *recorder) LocalAddr() net.Addr { return r.addr(53) }
func (r *recorder) RemoteAddr() net.Addr {
	return r.addr(40000)
}

func (r *recorder) addr(port int) net.Addr {
	if r.udp {
		return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	}
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
}

func (r *recorder) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	r.packed = b
	r.msg = new(dns.Msg)
	return r.msg.Unpack(b)
}

// Write keeps an answer written packed (wire.go's), unpacked as WriteMsg's.
func (r *recorder) Write(b []byte) (int, error) {
	r.packed = append([]byte(nil), b...)
	r.msg = new(dns.Msg)
	return len(b), r.msg.Unpack(r.packed)
}

func (r *recorder) Close() error        { return nil }
func (r *recorder) TsigStatus() error   { return nil }
func (r *recorder) TsigTimersOnly(bool) {}
func (r *recorder) Hijack()             {}

// ask sends req to s's handler as if over UDP (udp) or TCP and returns the
// answer as the client decodes it, or nil when there was none.
func ask(t *testing.T, s *Server, req *dns.Msg, udp bool) *dns.Msg {
	t.Helper()
	w := &recorder{udp: udp}
	s.ServeDNS(w, req)
	if w.msg == nil {
		return nil
	}
	if udp {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = max(size, int(opt.UDPSize()))
		}
		if len(w.packed) > size {
			t.Errorf("UDP answer of %d bytes exceeds the client's %d", len(w.packed), size)
		}
	}
	return w.msg
}

func question(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

// newServer returns a Server for cfg with testSnapshot indexed.
func newServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.TTL == 0 {
		cfg.TTL = 5
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Update(testSnapshot(t))
	return s
}

// serve runs s on loopback sockets until the test ends and returns its address.
func serve(t *testing.T, s *Server, pc net.PacketConn, ln net.Listener) string {
	t.Helper()
	if pc == nil {
		var err error
		if pc, ln, err = Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return pc.LocalAddr().String()
}

// upstream is a fake resolver on loopback: h answers, queries counts.
type fakeUpstream struct {
	addr    string
	mu      sync.Mutex
	queries []*dns.Msg
}

func startUpstream(t testing.TB, h func(w dns.ResponseWriter, req *dns.Msg)) *fakeUpstream {
	t.Helper()
	pc, ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &fakeUpstream{addr: pc.LocalAddr().String()}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		u.mu.Lock()
		u.queries = append(u.queries, req)
		u.mu.Unlock()
		h(w, req)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() {
			_ = srv.Shutdown()
			<-done
		})
	}
	return u
}

func (u *fakeUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.queries)
}

// answerA answers every question with one A record for 192.0.2.1, TTL 60.
func answerA(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	rr, _ := dns.NewRR(req.Question[0].Name + " 60 IN A 192.0.2.1")
	if req.Question[0].Qtype == dns.TypeA {
		m.Answer = append(m.Answer, rr)
	}
	_ = w.WriteMsg(m)
}

// deadAddr is a loopback UDP address where nothing listens: a query there
// fails at once with "connection refused".
func deadAddr(t testing.TB) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().String()
	c.Close()
	return addr
}

// clock is a fake time for the cache.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// active is the number of upstreams not known to loop.
func (f *forwarder) active() int {
	n := 0
	for _, u := range f.upstreams {
		if !u.looping.Load() {
			n++
		}
	}
	return n
}
