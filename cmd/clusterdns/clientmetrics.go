package main

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/metrics"
)

// registerClientMetrics exports the API client's requests under the names
// CoreDNS's kubernetes plugin gives them (plugin/kubernetes/metrics.go):
// coredns_kubernetes_rest_client_*. client-go takes one set of adapters per
// process (its metrics.Register runs once), so they are made once and
// registered in every registry asked for.
func registerClientMetrics(reg prometheus.Registerer) {
	clientMetricsOnce.Do(func() {
		clientMetrics.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "coredns_kubernetes_rest_client_request_duration_seconds", Help: "Request latency in seconds. Broken down by verb and host.",
			Buckets: prometheus.DefBuckets, NativeHistogramBucketFactor: 1.05}, []string{"verb", "host"})
		clientMetrics.rateLimiter = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "coredns_kubernetes_rest_client_rate_limiter_duration_seconds", Help: "Client side rate limiter latency in seconds. Broken down by verb and host.",
			Buckets: prometheus.DefBuckets, NativeHistogramBucketFactor: 1.05}, []string{"verb", "host"})
		clientMetrics.results = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coredns_kubernetes_rest_client_requests_total", Help: "Number of HTTP requests, partitioned by status code, method, and host."},
			[]string{"code", "method", "host"})
		metrics.Register(metrics.RegisterOpts{
			RequestLatency:     latencyAdapter{clientMetrics.latency},
			RateLimiterLatency: latencyAdapter{clientMetrics.rateLimiter},
			RequestResult:      resultAdapter{clientMetrics.results},
		})
	})
	reg.MustRegister(clientMetrics.latency, clientMetrics.rateLimiter, clientMetrics.results)
}

var (
	clientMetricsOnce sync.Once
	clientMetrics     struct {
		latency, rateLimiter *prometheus.HistogramVec
		results              *prometheus.CounterVec
	}
)

type latencyAdapter struct{ m *prometheus.HistogramVec }

func (l latencyAdapter) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	l.m.WithLabelValues(verb, validUTF8(u.Host)).Observe(latency.Seconds())
}

type resultAdapter struct{ m *prometheus.CounterVec }

func (r resultAdapter) Increment(_ context.Context, code, method, host string) {
	r.m.WithLabelValues(code, method, validUTF8(host)).Inc()
}

// validUTF8 is CoreDNS's sanitizeLabelValue: label values must be UTF-8.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
