package dns_test

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// badUpstream is a resolver started by the test inside the lab's namespace
// that misbehaves on demand: it drops questions, delays them, answers
// SERVFAIL, or sends them back to clusterdns (a forwarding loop).
type badUpstream struct {
	addr  string
	mode  atomic.Value // string: "answer", "drop", "delay", "servfail", "loop"
	delay time.Duration
	mu    sync.Mutex
	names []string // questions received
	seen  chan string

	// back is a socket to clusterdns made inside the namespace: a socket
	// made by a handler's goroutine would be in the host's namespace.
	backMu sync.Mutex
	back   *dns.Conn
}

func startBadUpstream(t *testing.T, l *lab, addr string) *badUpstream {
	t.Helper()
	u := &badUpstream{addr: addr, delay: 3 * time.Second, seen: make(chan string, 1000)}
	u.mode.Store("answer")
	var pc net.PacketConn
	if err := l.ns.Do(func() (err error) {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		c, err := net.Dial("udp", "127.0.0.1:53")
		u.back = &dns.Conn{Conn: c}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.back.Close() })
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(u.serve)}
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
	return u
}

func (u *badUpstream) serve(w dns.ResponseWriter, req *dns.Msg) {
	name := req.Question[0].Name
	u.mu.Lock()
	u.names = append(u.names, name)
	u.mu.Unlock()
	u.seen <- name
	switch u.mode.Load().(string) {
	case "drop":
		return
	case "delay":
		time.Sleep(u.delay)
	case "servfail":
		_ = w.WriteMsg(new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
		return
	case "loop":
		// A fresh question to clusterdns, as a resolver that forwards to it does.
		q := new(dns.Msg).SetQuestion(name, req.Question[0].Qtype)
		u.backMu.Lock()
		_ = u.back.SetDeadline(time.Now().Add(2 * time.Second))
		err := u.back.WriteMsg(q)
		var m *dns.Msg
		if err == nil {
			m, err = u.back.ReadMsg()
		}
		u.backMu.Unlock()
		if err != nil {
			m = new(dns.Msg).SetRcode(req, dns.RcodeServerFailure)
		}
		m.Id = req.Id
		_ = w.WriteMsg(m)
		return
	}
	m := new(dns.Msg).SetReply(req)
	rr, _ := dns.NewRR(name + " 60 IN A 192.0.2.99")
	m.Answer = []dns.RR{rr}
	_ = w.WriteMsg(m)
}

func (u *badUpstream) asked(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, q := range u.names {
		if strings.EqualFold(q, dns.Fqdn(name)) {
			n++
		}
	}
	return n
}

// metric returns the line of clusterdns's /metrics that starts with prefix.
func (l *lab) metric(t *testing.T, prefix string) string {
	t.Helper()
	out := l.ns.Run(t, "curl", "-s", "http://127.0.0.1:9153/metrics")
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// TestBadUpstream: the first upstream misbehaves, dnsmasq behind it answers.
func TestBadUpstream(t *testing.T) {
	l := newLab(t, "127.0.0.1:5300,127.0.0.1:5353", "--upstream-timeout", "1s")
	bad := startBadUpstream(t, l, "127.0.0.1:5300")
	dig := func(args ...string) string {
		return l.ns.Run(t, "dig", append([]string{"@127.0.0.1", "+tries=1", "+time=5"}, args...)...)
	}

	t.Run("SERVFAIL: the next upstream answers", func(t *testing.T) {
		bad.mode.Store("servfail")
		if out := dig("+short", "upstream.test"); strings.TrimSpace(out) != "192.0.2.7" {
			t.Errorf("dig upstream.test: %q, want dnsmasq's 192.0.2.7", out)
		}
	})

	t.Run("drops: marked down, asked no more, probed back", func(t *testing.T) {
		bad.mode.Store("drop")
		for _, name := range []string{"a.upstream.test", "b.upstream.test", "c.upstream.test", "d.upstream.test"} {
			if out := dig("+short", name); strings.TrimSpace(out) != "192.0.2.7" {
				t.Fatalf("dig %s: %q, want dnsmasq's answer", name, out)
			}
		}
		if n := bad.asked("c.upstream.test") + bad.asked("d.upstream.test"); n != 0 {
			t.Errorf("the dropping upstream was still asked first after two timeouts (%d times)", n)
		}
		if m := l.metric(t, `clusterdns_forward_upstream_healthy{upstream="127.0.0.1:5300"}`); !strings.HasSuffix(m, " 0") {
			t.Errorf("health gauge: %q, want 0", m)
		}
		bad.mode.Store("answer")
		l.waitFor(t, "the upstream probed back to health", "192.0.2.99", "dig", "@127.0.0.1", "+short", "e.example")
	})

}

// TestMaxConcurrent: an upstream that delays every answer holds queries in
// flight; beyond --max-concurrent clusterdns answers REFUSED at once.
func TestMaxConcurrent(t *testing.T) {
	l := newLab(t, "127.0.0.1:5300", "--upstream-timeout", "5s", "--max-concurrent", "2")
	bad := startBadUpstream(t, l, "127.0.0.1:5300")
	bad.mode.Store("delay")
	var wg sync.WaitGroup
	for _, name := range []string{"slow1.example", "slow2.example"} {
		wg.Go(func() {
			out, _ := l.ns.Command(t.Context(), "dig", "@127.0.0.1", "+tries=1", "+time=8", "+short", name).CombinedOutput()
			if strings.TrimSpace(string(out)) != "192.0.2.99" {
				t.Errorf("dig %s: %q, want the delayed answer", name, out)
			}
		})
	}
	<-bad.seen
	<-bad.seen // both are upstream now
	out := l.ns.Run(t, "dig", "@127.0.0.1", "+tries=1", "+time=8", "third.example")
	if !strings.Contains(out, "status: REFUSED") {
		t.Errorf("a third concurrent query: want REFUSED:\n%s", out)
	}
	wg.Wait()
	if m := l.metric(t, "coredns_forward_max_concurrent_rejects_total"); m != "coredns_forward_max_concurrent_rejects_total 1" {
		t.Errorf("rejects metric: %q", m)
	}
}

// TestLoopRecovers: an upstream that sends our queries back is a loop:
// clusterdns stops forwarding to it and /healthz fails; once the upstream
// answers again, a re-probe ends the loop and forwarding resumes.
func TestLoopRecovers(t *testing.T) {
	l := newLab(t, "127.0.0.1:5300", "--upstream-timeout", "1s")
	bad := startBadUpstream(t, l, "127.0.0.1:5300")
	l.waitFor(t, "forwarding", "192.0.2.99", "dig", "@127.0.0.1", "+short", "before.example")
	// The upstream is reconfigured to forward to us: the next loop probe
	// (every 10 seconds) comes back.
	bad.mode.Store("loop")
	l.waitFor(t, "/healthz fails during the loop", "forwarding loop", "curl", "-s", "http://127.0.0.1:9153/healthz")
	out := l.ns.Run(t, "dig", "@127.0.0.1", "+tries=1", "+time=5", "looped.example")
	if !strings.Contains(out, "status: SERVFAIL") {
		t.Errorf("a query with the only upstream looping: want SERVFAIL:\n%s", out)
	}
	if !strings.Contains(l.logs.String(), "forwarding loop") {
		t.Errorf("the loop is not in the log:\n%s", l.logs)
	}
	bad.mode.Store("answer")
	// The looping upstream is probed again every 10 seconds.
	l.waitFor(t, "/healthz after the loop ended", "ok", "curl", "-s", "http://127.0.0.1:9153/healthz")
	l.waitFor(t, "forwarding resumed", "192.0.2.99", "dig", "@127.0.0.1", "+short", "after.example")
}
