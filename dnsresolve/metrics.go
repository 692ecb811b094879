package dnsresolve

import (
	"net"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/service"
)

// Metrics are the DNS server's Prometheus metrics, under CoreDNS v1.14.6's
// names, types, buckets and labels wherever CoreDNS has the fact
// (plugin/metrics/vars, plugin/cache, plugin/forward, plugin/pkg/proxy,
// plugin/kubernetes/object), so that CoreDNS's dashboards and alerts read
// clusterdns; clusterdns_* for what CoreDNS does not count. One Metrics
// lives as long as the process: the Servers a reloaded Corefile makes one
// after another count into it (Config.Metrics), as CoreDNS's global
// metrics outlive its reloads.
type Metrics struct {
	requests  *prometheus.CounterVec   // server, zone, view, proto, family, type
	duration  *prometheus.HistogramVec // server, zone, view
	reqSize   *prometheus.HistogramVec // server, zone, view, proto
	respSize  *prometheus.HistogramVec // server, zone, view, proto
	do        *prometheus.CounterVec   // server, zone, view
	responses *prometheus.CounterVec   // server, zone, view, rcode, plugin
	panics    prometheus.Counter
	enabled   *prometheus.GaugeVec // server, zone, view, name

	cacheRequests, cacheMisses *prometheus.CounterVec // server, zones, view
	cacheHits, cacheEvictions  *prometheus.CounterVec // server, type, zones, view

	healthcheckBroken    prometheus.Counter
	maxConcurrentRejects prometheus.Counter
	proxyDuration        *prometheus.HistogramVec // proxy_name, to, rcode
	proxyHealthFailures  *prometheus.CounterVec   // proxy_name, to
	proxyConnMisses      *prometheus.CounterVec   // proxy_name, to, proto
	programming          *prometheus.HistogramVec // service_kind

	forwards, forwardsTCP, forwardErrors prometheus.Counter
	loops, truncated, invalid, snapshots prometheus.Counter

	// current is the Server that serves now: the gauges read it.
	current atomic.Pointer[Server]

	// triggers are the EndpointSlice trigger times already observed in
	// coredns_kubernetes_dns_programming_duration_seconds, by Service and
	// slice; started is when the Metrics were made: older triggers are
	// not this process's to time.
	mu       sync.Mutex
	triggers map[string]time.Time
	started  time.Time
}

// timeBuckets are CoreDNS's plugin.TimeBuckets: 0.25ms doubling to 8s.
var timeBuckets = prometheus.ExponentialBuckets(0.00025, 2, 16)

// sizeBuckets are CoreDNS's request and response size buckets, in bytes.
var sizeBuckets = []float64{0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16e3, 32e3, 48e3, 64e3}

// nativeFactor is CoreDNS's plugin.NativeHistogramBucketFactor.
const nativeFactor = 1.05

// NewMetrics registers the metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{triggers: make(map[string]time.Time), started: time.Now()}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		reg.MustRegister(v)
		return v
	}
	histogramVec := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets,
			NativeHistogramBucketFactor: nativeFactor}, labels)
		reg.MustRegister(v)
		return v
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(c)
		return c
	}

	// plugin/metrics/vars/vars.go
	m.requests = counterVec("coredns_dns_requests_total", "Counter of DNS requests made per zone, protocol and family.",
		"server", "zone", "view", "proto", "family", "type")
	m.duration = histogramVec("coredns_dns_request_duration_seconds", "Histogram of the time (in seconds) each request took per zone.",
		timeBuckets, "server", "zone", "view")
	m.reqSize = histogramVec("coredns_dns_request_size_bytes", "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol.",
		sizeBuckets, "server", "zone", "view", "proto")
	m.do = counterVec("coredns_dns_do_requests_total", "Counter of DNS requests with DO bit set per zone.", "server", "zone", "view")
	m.respSize = histogramVec("coredns_dns_response_size_bytes", "Size of the returned response in bytes.",
		sizeBuckets, "server", "zone", "view", "proto")
	m.responses = counterVec("coredns_dns_responses_total", "Counter of response status codes.",
		"server", "zone", "view", "rcode", "plugin")
	m.panics = counter("coredns_panics_total", "A metrics that counts the number of panics.")
	m.enabled = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coredns_plugin_enabled",
		Help: "A metric that indicates whether a plugin is enabled on per server and zone basis."}, []string{"server", "zone", "view", "name"})
	reg.MustRegister(m.enabled)
	// plugin/metrics/metrics.go: the build, as clusterdns's.
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coredns_build_info",
		Help: "A metric with a constant '1' value labeled by version, revision, and goversion from which CoreDNS was built."},
		[]string{"version", "revision", "goversion"})
	build.WithLabelValues(buildVersion()).Set(1)
	reg.MustRegister(build)

	// plugin/cache/metrics.go (prefetch and served_stale: clusterdns has
	// neither option).
	m.cacheRequests = counterVec("coredns_cache_requests_total", "The count of cache requests.", "server", "zones", "view")
	m.cacheHits = counterVec("coredns_cache_hits_total", "The count of cache hits.", "server", "type", "zones", "view")
	m.cacheMisses = counterVec("coredns_cache_misses_total",
		"The count of cache misses. Deprecated, derive misses from cache hits/requests counters.", "server", "zones", "view")
	m.cacheEvictions = counterVec("coredns_cache_evictions_total", "The count of cache evictions.", "server", "type", "zones", "view")

	// plugin/forward/metrics.go and plugin/pkg/proxy/metrics.go
	m.healthcheckBroken = counter("coredns_forward_healthcheck_broken_total", "Counter of the number of complete failures of the healthchecks.")
	m.maxConcurrentRejects = counter("coredns_forward_max_concurrent_rejects_total",
		"Counter of the number of queries rejected because the concurrent queries were at maximum.")
	m.proxyDuration = histogramVec("coredns_proxy_request_duration_seconds", "Histogram of the time each request took.",
		timeBuckets, "proxy_name", "to", "rcode")
	m.proxyHealthFailures = counterVec("coredns_proxy_healthcheck_failures_total", "Counter of the number of failed healthchecks.", "proxy_name", "to")
	m.proxyConnMisses = counterVec("coredns_proxy_conn_cache_misses_total", "Counter of connection cache misses per upstream and protocol.",
		"proxy_name", "to", "proto")

	// plugin/kubernetes/object/metrics.go: 1ms to about 17 minutes.
	m.programming = histogramVec("coredns_kubernetes_dns_programming_duration_seconds",
		"Histogram of the time (in seconds) it took to program a dns instance.",
		prometheus.ExponentialBuckets(0.001, 2, 20), "service_kind")

	// clusterdns's own.
	m.forwards = counter("clusterdns_forward_requests_total", "Queries sent to upstreams (UDP and TCP).")
	m.forwardsTCP = counter("clusterdns_forward_tcp_retries_total", "Truncated upstream answers asked again over TCP.")
	m.forwardErrors = counter("clusterdns_forward_errors_total", "Upstream exchanges that failed or timed out.")
	m.loops = counter("clusterdns_forward_loops_total", "Forwarding loops detected (an upstream sent our own query back).")
	m.truncated = counter("clusterdns_truncated_total", "Answers truncated (TC) to fit the client's UDP size.")
	m.invalid = counter("clusterdns_invalid_messages_total", "Messages that could not be parsed.")
	m.snapshots = counter("clusterdns_snapshots_total", "Service snapshots indexed.")
	reg.MustRegister(gaugeCollector{m})
	return m
}

// buildVersion is coredns_build_info's labels: clusterdns's module version
// (CoreDNS's is its release), the VCS revision and the Go version.
func buildVersion() (version, revision, goversion string) {
	version, revision = "clusterdns", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version += "-" + v
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	return version, revision, runtime.Version()
}

// SetPlugins sets coredns_plugin_enabled for the plugins of the server
// named server (its "dns://:53"), as CoreDNS does at every start and reload:
// the plugins that handle queries, each 1, and no others.
func (m *Metrics) SetPlugins(server string, names []string) {
	m.enabled.Reset()
	for _, n := range names {
		m.enabled.WithLabelValues(server, ".", "", n).Set(1)
	}
}

// Panic counts a recovered panic (coredns_panics_total).
func (m *Metrics) Panic() { m.panics.Inc() }

// gauge descriptions, read from the current Server when scraped.
var (
	descCacheEntries = prometheus.NewDesc("coredns_cache_entries", "The number of elements in the cache.",
		[]string{"server", "type", "zones", "view"}, nil)
	descServices  = prometheus.NewDesc("clusterdns_services", "Services in the current snapshot.", nil, nil)
	descReady     = prometheus.NewDesc("clusterdns_ready", "1 once the first snapshot is indexed.", nil, nil)
	descInflight  = prometheus.NewDesc("clusterdns_forward_inflight", "Queries waiting for an upstream.", nil, nil)
	descUpHealthy = prometheus.NewDesc("clusterdns_forward_upstream_healthy",
		"1 while the upstream answers, 0 while it is marked down.", []string{"upstream"}, nil)
	descUpLooping = prometheus.NewDesc("clusterdns_forward_upstream_looping",
		"1 while the upstream is known to forward back to this server.", []string{"upstream"}, nil)
)

// gaugeCollector reports the gauges of the current Server.
type gaugeCollector struct{ m *Metrics }

func (g gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCacheEntries, descServices, descReady, descInflight, descUpHealthy, descUpLooping} {
		ch <- d
	}
}

func (g gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	s := g.m.current.Load()
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	success, denial := s.cache.lens()
	gauge(descCacheEntries, float64(success), s.metrics.labels.server, "success", s.metrics.labels.cacheZones, "")
	gauge(descCacheEntries, float64(denial), s.metrics.labels.server, "denial", s.metrics.labels.cacheZones, "")
	services := 0
	if ix := s.index.Load(); ix != nil {
		services = ix.Len()
	}
	gauge(descServices, float64(services))
	gauge(descReady, b2f(s.Ready()))
	gauge(descInflight, float64(s.fwd.inflight.Load()))
	for _, u := range s.fwd.upstreams {
		gauge(descUpHealthy, b2f(u.healthy()), u.addr)
		gauge(descUpLooping, b2f(u.looping.Load()), u.addr)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// MetricLabels are the values CoreDNS puts in the labels of a server's
// metrics.
type MetricLabels struct {
	// Server is the server's address as CoreDNS names it: "dns://:53".
	Server string
	// Plugin is the plugin label of coredns_dns_responses_total for an
	// answer written to the client. CoreDNS v1.14.6 sets it from the
	// writer that wraps the metrics plugin's recorder, which is the next
	// plugin in its chain's: "errors" in kubeadm's Corefile, whatever
	// plugin made the answer. An error answered by the server itself
	// (SERVFAIL and REFUSED that no plugin writes) has none.
	Plugin string
	// CacheZones is the cache plugin's zones label ("." in kubeadm's).
	CacheZones string
}

// serverLabels is MetricLabels with defaults applied: kubeadm's Corefile.
type serverLabels struct {
	server, plugin, cacheZones string
}

func newServerLabels(l MetricLabels) serverLabels {
	out := serverLabels{server: l.Server, plugin: l.Plugin, cacheZones: l.CacheZones}
	if out.server == "" {
		out.server = "dns://:53"
	}
	if out.cacheZones == "" {
		out.cacheZones = "."
	}
	return out
}

// serverMetrics are a Server's children of the Metrics' vectors, for its
// label values, made on first use and kept: a query finds its counters
// without hashing label values.
type serverMetrics struct {
	*Metrics
	labels serverLabels

	requests  [2][2][numMonitorTypes + 1]atomic.Pointer[counterBox] // proto, family, type
	responses [2][24]atomic.Pointer[counterBox]                     // written by a plugin, rcode
	duration  prometheus.Observer
	reqSize   [2]prometheus.Observer // udp, tcp
	respSize  [2]prometheus.Observer
	do        prometheus.Counter

	cacheRequests, cacheMisses prometheus.Counter
	cacheHits                  [2]prometheus.Counter // success, denial
	cacheEvictions             [2]prometheus.Counter
}

type counterBox struct{ prometheus.Counter }

func newServerMetrics(m *Metrics, l serverLabels) *serverMetrics {
	s := &serverMetrics{Metrics: m, labels: l}
	s.duration = m.duration.WithLabelValues(l.server, ".", "")
	for i, proto := range []string{"udp", "tcp"} {
		s.reqSize[i] = m.reqSize.WithLabelValues(l.server, ".", "", proto)
		s.respSize[i] = m.respSize.WithLabelValues(l.server, ".", "", proto)
	}
	s.do = m.do.WithLabelValues(l.server, ".", "")
	s.cacheRequests = m.cacheRequests.WithLabelValues(l.server, l.cacheZones, "")
	s.cacheMisses = m.cacheMisses.WithLabelValues(l.server, l.cacheZones, "")
	for i, t := range []string{"success", "denial"} {
		s.cacheHits[i] = m.cacheHits.WithLabelValues(l.server, t, l.cacheZones, "")
		s.cacheEvictions[i] = m.cacheEvictions.WithLabelValues(l.server, t, l.cacheZones, "")
	}
	return s
}

// monitorTypes are the query types CoreDNS counts by name
// (plugin/metrics/vars/monitor.go); others are "other".
var monitorTypes = []uint16{
	dns.TypeAAAA, dns.TypeA, dns.TypeCNAME, dns.TypeDNSKEY, dns.TypeDS, dns.TypeMX, dns.TypeNSEC3, dns.TypeNSEC,
	dns.TypeNS, dns.TypePTR, dns.TypeRRSIG, dns.TypeSOA, dns.TypeSRV, dns.TypeTXT, dns.TypeHTTPS, dns.TypeSVCB,
	dns.TypeIXFR, dns.TypeAXFR, dns.TypeANY,
}

// numMonitorTypes is len(monitorTypes).
const numMonitorTypes = 19

// typeIndex is t's place in monitorTypes, len(monitorTypes) for "other".
func typeIndex(t uint16) int {
	for i, mt := range monitorTypes {
		if mt == t {
			return i
		}
	}
	return len(monitorTypes)
}

// query is what one answered query tells the metrics.
type query struct {
	qtype    uint16
	tcp, ip6 bool
	do       bool
	reqLen   int
	respLen  int
	rcode    int
	written  bool // a plugin wrote the answer (see MetricLabels.Plugin)
	took     time.Duration
	inCache  bool     // the name is in the cache's zones: it went through the cache
	cacheHit cacheHit // and was answered from it
}

// observe counts one answered query, as CoreDNS's vars.Report and its cache
// plugin do.
func (s *serverMetrics) observe(q *query) {
	proto, fam := b2i(q.tcp), b2i(q.ip6)
	ti := typeIndex(q.qtype)
	slot := &s.requests[proto][fam][ti]
	c := slot.Load()
	if c == nil {
		typ := "other"
		if ti < len(monitorTypes) {
			typ = dns.Type(q.qtype).String()
		}
		c = &counterBox{s.Metrics.requests.WithLabelValues(s.labels.server, ".", "", [2]string{"udp", "tcp"}[proto],
			[2]string{"1", "2"}[fam], typ)}
		slot.Store(c)
	}
	c.Inc()
	if q.do {
		s.do.Inc()
	}
	s.duration.Observe(q.took.Seconds())
	s.respSize[proto].Observe(float64(q.respLen))
	s.reqSize[proto].Observe(float64(q.reqLen))

	var r *counterBox
	written := b2i(q.written)
	if q.rcode >= 0 && q.rcode < len(s.responses[written]) {
		slot := &s.responses[written][q.rcode]
		if r = slot.Load(); r == nil {
			r = &counterBox{s.responseCounter(q.rcode, q.written)}
			slot.Store(r)
		}
	} else {
		r = &counterBox{s.responseCounter(q.rcode, q.written)}
	}
	r.Inc()

	if q.inCache {
		s.cacheRequests.Inc()
		if q.cacheHit == cacheMissed {
			s.cacheMisses.Inc()
		} else {
			s.cacheHits[q.cacheHit-1].Inc()
		}
	}
}

func (s *serverMetrics) responseCounter(rcode int, written bool) prometheus.Counter {
	plugin := ""
	if written {
		plugin = s.labels.plugin
	}
	return s.Metrics.responses.WithLabelValues(s.labels.server, ".", "", rcodeLabel(rcode), plugin)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rcodeLabel names a response code as CoreDNS's rcode.ToString does: miekg/dns's
// name, or "RCODE" and the number. (16 is "BADSIG" there, its meaning in a
// TSIG record; in a message's OPT it is BADVERS: CoreDNS's label all the same.)
func rcodeLabel(rcode int) string {
	if s, ok := dns.RcodeToString[rcode]; ok {
		return s
	}
	return "RCODE" + strconv.Itoa(rcode)
}

// family reports whether addr is an IPv6 client (CoreDNS's request.Family:
// an IPv4-mapped address is IPv4).
func isIPv6(addr net.Addr) bool {
	var ip net.IP
	switch a := addr.(type) {
	case *udpSession:
		return !a.remote.Addr().Unmap().Is4()
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	default:
		return false
	}
	return ip.To4() == nil
}

// proxyObserve records one upstream exchange that got an answer
// (coredns_proxy_request_duration_seconds) and the connection it needed: a
// miss every time, as clusterdns keeps none open.
func (m *Metrics) proxyObserve(to, proto string, rcode int, took time.Duration) {
	m.proxyConnMisses.WithLabelValues("forward", to, proto).Inc()
	m.proxyDuration.WithLabelValues("forward", to, rcodeLabel(rcode)).Observe(took.Seconds())
}

// observeProgramming observes, for each EndpointSlice change snap brings,
// the time from its trigger (its last-change-trigger-time) to now, when the
// change is in the index that answers: coredns_kubernetes_dns_programming_duration_seconds,
// whose service_kind is cluster_ip or headless_with_selector (the
// EndpointSlice controller stamps the slices of Services with a selector
// only). A trigger older than the process is not timed.
func (m *Metrics) observeProgramming(snap *service.Snapshot, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := make(map[string]time.Time, len(m.triggers))
	for _, svc := range snap.Services() {
		for _, t := range svc.Triggers {
			key := svc.NamespacedName.String() + "/" + t.Slice
			seen[key] = t.At
			if t.At.Before(m.started) || t.At.Equal(m.triggers[key]) {
				continue
			}
			kind := "cluster_ip"
			if svc.Headless {
				kind = "headless_with_selector"
			}
			m.programming.WithLabelValues(kind).Observe(now.Sub(t.At).Seconds())
		}
	}
	m.triggers = seen
}
