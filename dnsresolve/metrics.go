package dnsresolve

import (
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// metrics are the Server's counters, written in the Prometheus text exposition
// format by hand: a few atomic counters do not need a client library.
// Names follow CoreDNS's where one exists (coredns_dns_requests_total, ...).
type metrics struct {
	// queries[type][rcode]: fixed arrays, so counting is one atomic add.
	queries [len(metricTypes) + 1][maxMetricRcode + 2]atomic.Uint64
	// latency histogram: counts per bucket (not cumulative), sum in µs.
	buckets  [len(latencyBuckets) + 1]atomic.Uint64
	sumMicro atomic.Uint64

	cacheHits, cacheMisses atomic.Uint64
	forwards, forwardsTCP  atomic.Uint64
	forwardErrors          atomic.Uint64
	loops                  atomic.Uint64
	truncated              atomic.Uint64
	invalid                atomic.Uint64
	snapshots              atomic.Uint64
}

// metricTypes are the query types counted by name; others count as "other",
// which keeps the label set small whatever clients send.
var metricTypes = [...]uint16{
	dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR, dns.TypeTXT, dns.TypeCNAME,
	dns.TypeSOA, dns.TypeNS, dns.TypeMX, dns.TypeHINFO, dns.TypeANY, dns.TypeHTTPS,
}

// maxMetricRcode: rcodes above it (extended ones) count as "other".
const maxMetricRcode = dns.RcodeBadCookie

// latencyBuckets are CoreDNS's request duration buckets (seconds): 0.25ms doubling to 8s.
var latencyBuckets = [...]float64{
	0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032,
	0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192,
}

func typeIndex(t uint16) int {
	for i, mt := range metricTypes {
		if mt == t {
			return i
		}
	}
	return len(metricTypes)
}

// observe counts one answered query.
func (m *metrics) observe(qtype uint16, rcode int, d time.Duration) {
	r := rcode
	if r < 0 || r > maxMetricRcode {
		r = maxMetricRcode + 1
	}
	m.queries[typeIndex(qtype)][r].Add(1)
	s := d.Seconds()
	i := 0
	for i < len(latencyBuckets) && s > latencyBuckets[i] {
		i++
	}
	m.buckets[i].Add(1)
	m.sumMicro.Add(uint64(d.Microseconds()))
}

// write renders the metrics; services and cacheEntries are gauges read by the caller.
func (m *metrics) write(w io.Writer, services, cacheEntries int, ready bool) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }

	p("# HELP clusterdns_requests_total DNS queries answered, by query type and response code.\n")
	p("# TYPE clusterdns_requests_total counter\n")
	for ti := range m.queries {
		for ri := range m.queries[ti] {
			if n := m.queries[ti][ri].Load(); n > 0 {
				p("clusterdns_requests_total{type=%q,rcode=%q} %d\n", typeLabel(ti), rcodeLabel(ri), n)
			}
		}
	}

	p("# HELP clusterdns_request_duration_seconds Time from a query's arrival to its answer.\n")
	p("# TYPE clusterdns_request_duration_seconds histogram\n")
	var cum uint64
	for i, le := range latencyBuckets {
		cum += m.buckets[i].Load()
		p("clusterdns_request_duration_seconds_bucket{le=%q} %d\n", strconv.FormatFloat(le, 'g', -1, 64), cum)
	}
	cum += m.buckets[len(latencyBuckets)].Load()
	p("clusterdns_request_duration_seconds_bucket{le=\"+Inf\"} %d\n", cum)
	p("clusterdns_request_duration_seconds_sum %g\n", float64(m.sumMicro.Load())/1e6)
	p("clusterdns_request_duration_seconds_count %d\n", cum)

	counter := func(name, help string, v uint64) {
		p("# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	gauge := func(name, help string, v int) {
		p("# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
	}
	counter("clusterdns_cache_hits_total", "Forwarded questions answered from the cache.", m.cacheHits.Load())
	counter("clusterdns_cache_misses_total", "Forwarded questions not in the cache.", m.cacheMisses.Load())
	gauge("clusterdns_cache_entries", "Answers held in the cache.", cacheEntries)
	counter("clusterdns_forward_requests_total", "Queries sent to upstreams (UDP and TCP).", m.forwards.Load())
	counter("clusterdns_forward_tcp_retries_total", "Truncated upstream answers asked again over TCP.", m.forwardsTCP.Load())
	counter("clusterdns_forward_errors_total", "Upstream exchanges that failed or timed out.", m.forwardErrors.Load())
	counter("clusterdns_forward_loops_total", "Upstreams found to forward back to this server.", m.loops.Load())
	counter("clusterdns_truncated_total", "Answers truncated (TC) to fit the client's UDP size.", m.truncated.Load())
	counter("clusterdns_invalid_messages_total", "Messages that could not be parsed.", m.invalid.Load())
	counter("clusterdns_snapshots_total", "Service snapshots indexed.", m.snapshots.Load())
	gauge("clusterdns_services", "Services in the current snapshot.", services)
	r := 0
	if ready {
		r = 1
	}
	gauge("clusterdns_ready", "1 once the first snapshot is indexed.", r)
}

func typeLabel(i int) string {
	if i < len(metricTypes) {
		return dns.TypeToString[metricTypes[i]]
	}
	return "other"
}

func rcodeLabel(i int) string {
	if s, ok := dns.RcodeToString[i]; ok && i <= maxMetricRcode {
		return s
	}
	return "other"
}
