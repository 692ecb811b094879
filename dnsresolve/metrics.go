package dnsresolve

import (
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Server's Prometheus metrics, registered in one registry
// (Config.Registry, or the Server's own). Names follow CoreDNS's where one
// exists (coredns_dns_requests_total is clusterdns_requests_total, ...).
type metrics struct {
	requests *prometheus.CounterVec // type, rcode
	duration prometheus.Histogram

	cacheHits, cacheMisses prometheus.Counter
	forwards, forwardsTCP  prometheus.Counter
	forwardErrors          prometheus.Counter
	maxConcurrentRejects   prometheus.Counter
	healthcheckFailures    *prometheus.CounterVec // upstream
	loops                  prometheus.Counter
	truncated              prometheus.Counter
	invalid                prometheus.Counter
	snapshots              prometheus.Counter
}

// latencyBuckets are CoreDNS's request duration buckets (seconds): 0.25ms doubling to 8s.
var latencyBuckets = prometheus.ExponentialBuckets(0.00025, 2, 16)

// gauges are read when /metrics is scraped.
type gauges struct {
	services     func() int
	cacheEntries func() int
	ready        func() bool
	inflight     func() int64
	upstreams    []*upstream
}

func newMetrics(reg prometheus.Registerer, g gauges) *metrics {
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(c)
		return c
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterdns_requests_total",
			Help: "DNS queries answered, by query type and response code.",
		}, []string{"type", "rcode"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "clusterdns_request_duration_seconds",
			Help:    "Time from a query's arrival to its answer.",
			Buckets: latencyBuckets,
		}),
		healthcheckFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterdns_forward_healthcheck_failures_total",
			Help: "Health probes of a down upstream that failed.",
		}, []string{"upstream"}),
	}
	reg.MustRegister(m.requests, m.duration, m.healthcheckFailures)
	m.cacheHits = counter("clusterdns_cache_hits_total", "Forwarded questions answered from the cache.")
	m.cacheMisses = counter("clusterdns_cache_misses_total", "Forwarded questions not in the cache.")
	m.forwards = counter("clusterdns_forward_requests_total", "Queries sent to upstreams (UDP and TCP).")
	m.forwardsTCP = counter("clusterdns_forward_tcp_retries_total", "Truncated upstream answers asked again over TCP.")
	m.forwardErrors = counter("clusterdns_forward_errors_total", "Upstream exchanges that failed or timed out.")
	m.maxConcurrentRejects = counter("clusterdns_forward_max_concurrent_rejects_total",
		"Queries answered REFUSED because --max-concurrent upstream queries were in flight.")
	m.loops = counter("clusterdns_forward_loops_total", "Forwarding loops detected (an upstream sent our own query back).")
	m.truncated = counter("clusterdns_truncated_total", "Answers truncated (TC) to fit the client's UDP size.")
	m.invalid = counter("clusterdns_invalid_messages_total", "Messages that could not be parsed.")
	m.snapshots = counter("clusterdns_snapshots_total", "Service snapshots indexed.")

	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("clusterdns_services", "Services in the current snapshot.", func() float64 { return float64(g.services()) })
	gauge("clusterdns_cache_entries", "Answers held in the cache.", func() float64 { return float64(g.cacheEntries()) })
	gauge("clusterdns_ready", "1 once the first snapshot is indexed.", func() float64 { return b2f(g.ready()) })
	gauge("clusterdns_forward_inflight", "Queries waiting for an upstream.", func() float64 { return float64(g.inflight()) })
	for _, u := range g.upstreams {
		labels := prometheus.Labels{"upstream": u.addr}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "clusterdns_forward_upstream_healthy", Help: "1 while the upstream answers, 0 while it is marked down.",
			ConstLabels: labels,
		}, func() float64 { return b2f(u.healthy()) }))
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "clusterdns_forward_upstream_looping", Help: "1 while the upstream is known to forward back to this server.",
			ConstLabels: labels,
		}, func() float64 { return b2f(u.looping.Load()) }))
	}
	return m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// observe counts one answered query.
func (m *metrics) observe(qtype uint16, rcode int, d time.Duration) {
	m.requests.WithLabelValues(typeLabel(qtype), rcodeLabel(rcode)).Inc()
	m.duration.Observe(d.Seconds())
}

// metricTypes are the query types counted by name; others count as "other",
// which keeps the label set small whatever clients send.
var metricTypes = map[uint16]string{}

func init() {
	for _, t := range []uint16{
		dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR, dns.TypeTXT, dns.TypeCNAME,
		dns.TypeSOA, dns.TypeNS, dns.TypeMX, dns.TypeHINFO, dns.TypeANY, dns.TypeHTTPS,
	} {
		metricTypes[t] = dns.TypeToString[t]
	}
}

func typeLabel(t uint16) string {
	if s, ok := metricTypes[t]; ok {
		return s
	}
	return "other"
}

// rcodeLabel names a response code. miekg/dns's RcodeToString names 16
// "BADSIG", its meaning inside a TSIG record (RFC 8945); in a message's header
// and OPT record, where our answers carry it, 16 is BADVERS (RFC 6891 6.1.3).
// Codes above BADCOOKIE count as "other".
func rcodeLabel(rcode int) string {
	if rcode == dns.RcodeBadVers {
		return "BADVERS"
	}
	if s, ok := dns.RcodeToString[rcode]; ok && rcode >= 0 && rcode <= dns.RcodeBadCookie {
		return s
	}
	return "other"
}
