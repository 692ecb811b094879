package dnsresolve

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape fetches s's /metrics and parses it as Prometheus does.
func scrape(t *testing.T, s *Server) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	s.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, rec.Body)
	}
	return mfs
}

// metricValue is the value of the sample of name whose labels include labels
// (a counter, a gauge, or a histogram's count), or -1 when there is none.
func metricValue(t *testing.T, s *Server, name string, labels map[string]string) float64 {
	t.Helper()
	mf := scrape(t, s)[name]
	if mf == nil {
		return -1
	}
next:
	for _, m := range mf.Metric {
		for k, v := range labels {
			found := false
			for _, lp := range m.Label {
				found = found || (lp.GetName() == k && lp.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func TestMetricsScrape(t *testing.T) {
	s := newServer(t, Config{})
	ask(t, s, question("web.default.svc.cluster.local.", dns.TypeA), true)
	ask(t, s, question("nope.default.svc.cluster.local.", dns.TypeAAAA), true)
	bad := question("web.default.svc.cluster.local.", dns.TypeA)
	bad.SetEdns0(1232, false)
	bad.IsEdns0().SetVersion(1)
	ask(t, s, bad, true)

	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		// CoreDNS's names and labels (plugin/metrics/vars): kubeadm's server.
		{"coredns_dns_requests_total", map[string]string{"server": "dns://:53", "zone": ".", "view": "", "proto": "udp", "family": "1", "type": "A"}, 2},
		{"coredns_dns_requests_total", map[string]string{"type": "AAAA"}, 1},
		{"coredns_dns_responses_total", map[string]string{"server": "dns://:53", "zone": ".", "rcode": "NOERROR", "plugin": ""}, 1},
		{"coredns_dns_responses_total", map[string]string{"rcode": "NXDOMAIN"}, 1},
		// 16 in a message with OPT is BADVERS; CoreDNS's rcode.ToString
		// names it BADSIG, TSIG's meaning, and so does its metric.
		{"coredns_dns_responses_total", map[string]string{"rcode": "BADSIG"}, 1},
		{"coredns_dns_request_duration_seconds", map[string]string{"server": "dns://:53", "zone": ".", "view": ""}, 3},
		{"coredns_dns_request_size_bytes", map[string]string{"proto": "udp"}, 3},
		{"coredns_dns_response_size_bytes", map[string]string{"proto": "udp"}, 3},
		{"coredns_cache_requests_total", map[string]string{"zones": "."}, 3},
		{"coredns_cache_misses_total", nil, 3},
		{"coredns_cache_entries", map[string]string{"type": "success"}, 0},
		{"coredns_build_info", nil, 1},
		{"clusterdns_services", nil, float64(s.index.Load().Len())},
		{"clusterdns_ready", nil, 1},
		{"coredns_forward_max_concurrent_rejects_total", nil, 0},
	}
	for _, tt := range tests {
		if got := metricValue(t, s, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

func TestRcodeLabel(t *testing.T) {
	for rc, want := range map[int]string{
		dns.RcodeSuccess: "NOERROR", dns.RcodeNameError: "NXDOMAIN", dns.RcodeBadVers: "BADSIG",
		dns.RcodeBadCookie: "BADCOOKIE", 4095: "RCODE4095", // CoreDNS's rcode.ToString
	} {
		if got := rcodeLabel(rc); got != want {
			t.Errorf("rcodeLabel(%d) = %q, want %q", rc, got, want)
		}
	}
}

// gate is an upstream that holds every question until opened, and counts them.
type gate struct {
	open    chan struct{}
	arrived chan string // question names, as they arrive
}

func newGate() *gate { return &gate{open: make(chan struct{}), arrived: make(chan string, 100)} }

func (g *gate) handle(w dns.ResponseWriter, req *dns.Msg) {
	g.arrived <- req.Question[0].Name
	<-g.open
	answerA(w, req)
}

// askAsync asks in a goroutine; the answer arrives on the channel.
func askAsync(t *testing.T, s *Server, req *dns.Msg) <-chan *dns.Msg {
	ch := make(chan *dns.Msg, 1)
	go func() {
		w := &recorder{udp: true}
		s.ServeDNS(w, req)
		ch <- w.msg
	}()
	return ch
}

// TestForwardMaxConcurrent: with --max-concurrent queries waiting for an
// upstream, the next one is REFUSED at once, as CoreDNS's max_concurrent does.
func TestForwardMaxConcurrent(t *testing.T) {
	g := newGate()
	up := startUpstream(t, g.handle)
	s := newServer(t, Config{Upstreams: []string{up.addr}, MaxConcurrent: 2})
	a := askAsync(t, s, question("a.example.", dns.TypeA))
	b := askAsync(t, s, question("b.example.", dns.TypeA))
	<-g.arrived
	<-g.arrived

	m := ask(t, s, question("c.example.", dns.TypeA), true)
	if m.Rcode != dns.RcodeRefused {
		t.Errorf("third concurrent query: %s, want REFUSED", dns.RcodeToString[m.Rcode])
	}
	close(g.open)
	for _, ch := range []<-chan *dns.Msg{a, b} {
		if m := <-ch; m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			t.Errorf("waiting query: %v", m)
		}
	}
	if got := metricValue(t, s, "coredns_forward_max_concurrent_rejects_total", nil); got != 1 {
		t.Errorf("rejects = %v, want 1", got)
	}
	if m := ask(t, s, question("c.example.", dns.TypeA), true); m.Rcode != dns.RcodeSuccess {
		t.Errorf("after the others were answered: %s", dns.RcodeToString[m.Rcode])
	}
}

// TestForwardSingleflight: clients asking the same question while it is
// upstream share one exchange, each gets the answer with its own ID.
func TestForwardSingleflight(t *testing.T) {
	g := newGate()
	up := startUpstream(t, g.handle)
	s := newServer(t, Config{Upstreams: []string{up.addr}})
	const clients = 5
	var chans []<-chan *dns.Msg
	var ids []uint16
	for i := range clients {
		name := "same.example."
		if i%2 == 1 {
			name = "SAME.example." // the cache key is case-insensitive
		}
		req := question(name, dns.TypeA)
		ids = append(ids, req.Id)
		chans = append(chans, askAsync(t, s, req))
	}
	<-g.arrived
	for s.fwd.inflight.Load() != clients {
		time.Sleep(time.Millisecond) // the other clients join the flight
	}
	close(g.open)
	for i, ch := range chans {
		m := <-ch
		if m.Id != ids[i] || len(m.Answer) != 1 {
			t.Errorf("client %d: id %d (want %d), answer %v", i, m.Id, ids[i], m.Answer)
		}
	}
	// Usually 1. A client counted in flight may not have joined the flight
	// yet when the gate opens, and then asks on its own: fewer exchanges
	// than clients is what sharing guarantees.
	if n := up.count(); n >= clients {
		t.Errorf("upstream asked %d times for %d clients: not shared", n, clients)
	}
}

// TestCacheCD: an answer fetched with CD=1 (not validated) is not served to a
// client that asked with CD=0.
func TestCacheCD(t *testing.T) {
	up := startUpstream(t, answerA)
	s := newServer(t, Config{Upstreams: []string{up.addr}})
	cd := question("example.org.", dns.TypeA)
	cd.CheckingDisabled = true
	ask(t, s, cd, true)
	ask(t, s, question("example.org.", dns.TypeA), true)
	if n := up.count(); n != 2 {
		t.Errorf("upstream asked %d times, want 2 (CD=1 and CD=0 are different questions)", n)
	}
	ask(t, s, cd, true)
	if n := up.count(); n != 2 {
		t.Errorf("upstream asked %d times, want the CD=1 answer from the cache", n)
	}
	if !up.queries[0].CheckingDisabled || up.queries[1].CheckingDisabled {
		t.Error("CD bit not passed on upstream")
	}
}

// TestUpstreamHealth: an upstream that drops every query is marked down after
// MaxFails timeouts and not asked first any more; the health check finds it
// again once it answers.
func TestUpstreamHealth(t *testing.T) {
	var answering atomic.Bool
	dropper := startUpstream(t, func(w dns.ResponseWriter, req *dns.Msg) {
		if answering.Load() {
			answerA(w, req)
		}
	})
	good := startUpstream(t, answerA)
	s := newServer(t, Config{Upstreams: []string{dropper.addr, good.addr}, UpstreamTimeout: 200 * time.Millisecond})
	for i := range 4 {
		m := ask(t, s, question(fmt.Sprintf("q%d.example.", i), dns.TypeA), true)
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			t.Fatalf("query %d: %v", i, m)
		}
	}
	if n := dropper.count(); n != DefaultMaxFails {
		t.Errorf("dropping upstream asked %d times, want %d: then it is down", n, DefaultMaxFails)
	}
	if got := metricValue(t, s, "clusterdns_forward_upstream_healthy", map[string]string{"upstream": dropper.addr}); got != 0 {
		t.Errorf("healthy gauge of the dropper = %v", got)
	}

	s.fwd.checkHealth(context.Background()) // still dropping: stays down
	if s.fwd.upstreams[0].healthy() {
		t.Fatal("marked up by a probe it did not answer")
	}
	if got := metricValue(t, s, "coredns_proxy_healthcheck_failures_total", map[string]string{"proxy_name": "forward", "to": dropper.addr}); got != 1 {
		t.Errorf("health check failures = %v, want 1", got)
	}
	answering.Store(true)
	s.fwd.checkHealth(context.Background())
	if !s.fwd.upstreams[0].healthy() {
		t.Fatal("not marked up after it answered a probe")
	}
	before := dropper.count()
	ask(t, s, question("q9.example.", dns.TypeA), true)
	if dropper.count() != before+1 {
		t.Error("the recovered first upstream is not asked first again")
	}
}

// TestUpstreamsAllDown: when every upstream is down they are still tried: one
// may be back before its probe says so.
func TestUpstreamsAllDown(t *testing.T) {
	var answering atomic.Bool
	flaky := startUpstream(t, func(w dns.ResponseWriter, req *dns.Msg) {
		if answering.Load() {
			answerA(w, req)
		}
	})
	s := newServer(t, Config{Upstreams: []string{flaky.addr}, UpstreamTimeout: 100 * time.Millisecond, MaxFails: 1})
	if m := ask(t, s, question("a.example.", dns.TypeA), true); m.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
	answering.Store(true)
	if m := ask(t, s, question("b.example.", dns.TypeA), true); m.Rcode != dns.RcodeSuccess {
		t.Errorf("rcode %s, want the down upstream tried", dns.RcodeToString[m.Rcode])
	}
}

// syncBuffer is a log destination tests read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestLoopLoudAndRecoverable: a relay that sends our queries back makes
// /healthz fail and the log repeat it; when the relay stops looping, a
// re-probe finds that out and forwarding resumes.
func TestLoopLoudAndRecoverable(t *testing.T) {
	pc, ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	self := pc.LocalAddr().String()
	var looping atomic.Bool
	looping.Store(true)
	relay := startUpstream(t, func(w dns.ResponseWriter, req *dns.Msg) {
		if !looping.Load() {
			answerA(w, req)
			return
		}
		fresh := question(req.Question[0].Name, req.Question[0].Qtype)
		m, _, err := new(dns.Client).Exchange(fresh, self)
		if err != nil {
			m = new(dns.Msg).SetRcode(req, dns.RcodeServerFailure)
		}
		m.Id = req.Id
		_ = w.WriteMsg(m)
	})
	logs := &syncBuffer{}
	s := newServer(t, Config{
		Upstreams: []string{relay.addr}, UpstreamTimeout: time.Second,
		LoopCheckInterval: time.Hour, LoopLogInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	serve(t, s, pc, ln) // probes every upstream at start

	const repeat = "/healthz fails until the loop is gone"
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(logs.String(), repeat) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the loop is not logged again and again:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rec := httptest.NewRecorder()
	s.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "forwarding loop") {
		t.Errorf("/healthz during a loop: %d %s", rec.Code, rec.Body)
	}

	looping.Store(false)
	s.fwd.recheckLoops(context.Background())
	if err := s.Healthy(); err != nil {
		t.Fatalf("still unhealthy after the loop ended: %v", err)
	}
	if m := ask(t, s, question("example.org.", dns.TypeA), true); len(m.Answer) != 1 {
		t.Errorf("forwarding did not resume: %v", m)
	}
	if !strings.Contains(logs.String(), "forwarding loop gone") {
		t.Errorf("recovery not logged:\n%s", logs)
	}
}

func TestLogQueries(t *testing.T) {
	logs := &syncBuffer{}
	s := newServer(t, Config{LogQueries: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ask(t, s, question("web.default.svc.cluster.local.default.svc.cluster.local.", dns.TypeAAAA), true)
	for _, want := range []string{"msg=query", "client=127.0.0.1:40000", "name=web.default.svc.cluster.local.default.svc.cluster.local.",
		"type=AAAA", "rcode=NXDOMAIN", "duration="} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("query log lacks %q:\n%s", want, logs)
		}
	}
	quiet := &syncBuffer{}
	s = newServer(t, Config{Logger: slog.New(slog.NewTextHandler(quiet, nil))})
	ask(t, s, question("web.default.svc.cluster.local.", dns.TypeA), true)
	if quiet.String() != "" {
		t.Errorf("queries logged without LogQueries:\n%s", quiet)
	}
}
