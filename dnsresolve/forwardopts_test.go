package dnsresolve

import (
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestPolicyOrder(t *testing.T) {
	seq := &policy{name: "sequential"}
	if got := seq.order([]int{0, 1, 2}); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("sequential: %v", got)
	}
	rr := &policy{name: "round_robin"}
	var firsts []int
	for range 4 {
		firsts = append(firsts, rr.order([]int{0, 1, 2})[0])
	}
	if !slices.Equal(firsts, []int{0, 1, 2, 0}) {
		t.Errorf("round_robin firsts: %v, want 0 1 2 0", firsts)
	}
	random := &policy{name: "random"}
	seen := map[int]bool{}
	for range 200 {
		o := random.order([]int{0, 1, 2})
		seen[o[0]] = true
		if s := slices.Sorted(slices.Values(o)); !slices.Equal(s, []int{0, 1, 2}) {
			t.Fatalf("random lost an upstream: %v", o)
		}
	}
	if len(seen) != 3 {
		t.Errorf("random: first upstreams %v in 200 draws", seen)
	}
}

func TestForwardOptions(t *testing.T) {
	o := ForwardOptions{From: "example.org", Except: []string{"private.example.org."}}
	for name, want := range map[string]bool{
		"www.example.org.": true, "EXAMPLE.ORG.": true, "a.private.example.org.": false, "example.com.": false,
	} {
		if got := o.forwards(name); got != want {
			t.Errorf("forwards(%s) = %v, want %v", name, got, want)
		}
	}
	if !(&ForwardOptions{}).forwards("anything.") {
		t.Error("the zero options forward nothing")
	}
	for _, tt := range []struct {
		failover []int
		rcode    int
		want     bool
	}{
		{nil, dns.RcodeServerFailure, true}, {nil, dns.RcodeRefused, true}, {nil, dns.RcodeNameError, false},
		{[]int{}, dns.RcodeServerFailure, false},
		{[]int{dns.RcodeRefused}, dns.RcodeRefused, true}, {[]int{dns.RcodeRefused}, dns.RcodeServerFailure, false},
	} {
		o := ForwardOptions{Failover: tt.failover}
		if got := o.failsOver(tt.rcode); got != tt.want {
			t.Errorf("failover %v, rcode %d: %v, want %v", tt.failover, tt.rcode, got, tt.want)
		}
	}
}

// TestRoundRobin: CNAMEs first, then other records, then the addresses in
// some order; the Index's shared slice is never reordered.
func TestRoundRobin(t *testing.T) {
	var shared []dns.RR
	for _, s := range []string{"a. 5 IN A 192.0.2.1", "a. 5 IN A 192.0.2.2", "a. 5 IN A 192.0.2.3", "x. 5 IN CNAME a.", "a. 5 IN TXT t"} {
		rr, _ := dns.NewRR(s)
		shared = append(shared, rr)
	}
	before := slices.Clone(shared)
	orders := map[string]bool{}
	for range 100 {
		m := new(dns.Msg).SetQuestion("x.", dns.TypeA)
		m.Response = true
		m.Answer = shared
		roundRobin(m)
		if m.Answer[0].Header().Rrtype != dns.TypeCNAME || m.Answer[1].Header().Rrtype != dns.TypeTXT {
			t.Fatalf("order: %v", m.Answer)
		}
		orders[m.Answer[2].String()] = true
	}
	if !slices.Equal(shared, before) {
		t.Error("the shared answer was reordered")
	}
	if len(orders) < 2 {
		t.Errorf("addresses never shuffled: %v", orders)
	}
}

// TestCacheOptions: CoreDNS's cache options on forwarded answers.
func TestCacheOptions(t *testing.T) {
	clk := newClock()
	answer := func(name string, ttl uint32) (*dns.Msg, *dns.Msg) {
		req := question(name, dns.TypeA)
		resp := new(dns.Msg).SetReply(req)
		rr, _ := dns.NewRR(name + " 60 IN A 192.0.2.1")
		rr.Header().Ttl = ttl
		resp.Answer = []dns.RR{rr}
		return req, resp
	}
	nx := func(name string) (*dns.Msg, *dns.Msg) {
		req := question(name, dns.TypeA)
		resp := new(dns.Msg).SetRcode(req, dns.RcodeNameError)
		soa, _ := dns.NewRR("example. 600 IN SOA ns. h. 1 2 3 4 600")
		resp.Ns = []dns.RR{soa}
		return req, resp
	}
	c := newCache(&CacheOptions{Zones: []string{"example."}, SuccessCap: 10, DenialCap: 10, SuccessTTL: 30 * time.Second,
		SuccessMinTTL: 5 * time.Second, DenialTTL: 30 * time.Second, DenialMinTTL: 5 * time.Second, ServfailTTL: 5 * time.Second,
		DisableSuccess: []string{"nocache.example."}}, clk.Now)

	req, resp := answer("a.example.", 60)
	c.put(req, resp)
	if got := resp.Answer[0].Header().Ttl; got != 30 {
		t.Errorf("the answer passed on: TTL %d, want 30 (capped at the cache's)", got)
	}
	if m, hit := c.get(req); m == nil || hit != cacheSuccess || m.Answer[0].Header().Ttl != 30 {
		t.Fatalf("cached: %v %v", m, hit)
	}
	clk.Advance(31 * time.Second)
	if m, _ := c.get(req); m != nil {
		t.Error("kept past the cache's TTL")
	}

	req, resp = answer("zero.example.", 0) // kept the least TTL, 5s
	c.put(req, resp)
	if m, _ := c.get(req); m == nil {
		t.Error("an answer with TTL 0 not kept for the minimum")
	}
	req, resp = answer("a.nocache.example.", 60)
	c.put(req, resp)
	if m, _ := c.get(req); m != nil {
		t.Error("disable success: cached")
	}
	req, resp = answer("a.other.org.", 60)
	c.put(req, resp)
	if m, _ := c.get(req); m != nil || c.enabled("a.other.org.") {
		t.Error("outside the cache's zones: cached")
	}
	req, resp = nx("nx.example.")
	c.put(req, resp)
	if m, hit := c.get(req); m == nil || hit != cacheDenial {
		t.Errorf("NXDOMAIN: %v %v, want a denial hit", m, hit)
	}
	req = question("sf.example.", dns.TypeA)
	c.put(req, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
	if m, hit := c.get(req); m == nil || hit != cacheDenial || m.Rcode != dns.RcodeServerFailure {
		t.Errorf("SERVFAIL: %v %v, want kept", m, hit)
	}
	clk.Advance(6 * time.Second)
	if m, _ := c.get(req); m != nil {
		t.Error("SERVFAIL kept past servfail's 5s")
	}

	keep := newCache(&CacheOptions{SuccessCap: 1, DenialCap: 1, SuccessTTL: time.Hour, KeepTTL: true}, clk.Now)
	var evicted []int
	keep.onEvict = func(kind int) { evicted = append(evicted, kind) }
	req, resp = answer("k.example.", 60)
	keep.put(req, resp)
	clk.Advance(10 * time.Second)
	if m, _ := keep.get(req); m == nil || m.Answer[0].Header().Ttl != 60 {
		t.Errorf("keepttl: %v, want TTL 60", m)
	}
	req2, resp2 := answer("k2.example.", 60)
	keep.put(req2, resp2)
	if !slices.Equal(evicted, []int{0}) {
		t.Errorf("evictions %v, want one of a success", evicted)
	}
}
