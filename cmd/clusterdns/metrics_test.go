package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/kapitest"
)

// docMetric is one row of docs/operations.md's table of clusterdns's
// metrics: its name, its labels, and whether only an API server source
// makes it.
type docMetric struct {
	name    string
	labels  []string
	apiOnly bool
}

const (
	metricsBegin = "<!-- BEGIN clusterdns metrics (cmd/clusterdns/metrics_test.go reads this table) -->"
	metricsEnd   = "<!-- END clusterdns metrics -->"
)

// docMetrics reads the table: every metric the docs promise.
func docMetrics(t *testing.T) []docMetric {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start, end := strings.Index(doc, metricsBegin), strings.Index(doc, metricsEnd)
	if start < 0 || end < start {
		t.Fatalf("docs/operations.md: no table between %q and %q", metricsBegin, metricsEnd)
	}
	var out []docMetric
	for line := range strings.SplitSeq(doc[start+len(metricsBegin):end], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		m := docMetric{name: strings.Trim(strings.TrimSpace(cells[1]), "`"), apiOnly: strings.Contains(cells[3], "from an API server only")}
		for l := range strings.SplitSeq(cells[2], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				m.labels = append(m.labels, l)
			}
		}
		out = append(out, m)
	}
	if len(out) < 30 {
		t.Fatalf("docs/operations.md's metrics table has %d rows", len(out))
	}
	return out
}

// scrapeFamilies parses a /metrics page with prometheus/common's text parser.
func scrapeFamilies(t *testing.T, port int) map[string]*dto.MetricFamily {
	t.Helper()
	body, code, err := get(port, "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// checkDocMetrics finds every documented metric that an API server source
// makes (apiOnly) or that any source makes (!apiOnly), with exactly its
// documented labels.
func checkDocMetrics(t *testing.T, fams map[string]*dto.MetricFamily, apiOnly bool) {
	t.Helper()
	for _, m := range docMetrics(t) {
		if m.apiOnly != apiOnly {
			continue
		}
		f := fams[m.name]
		if f == nil || len(f.Metric) == 0 {
			t.Errorf("%s: documented, not scraped", m.name)
			continue
		}
		for _, s := range f.Metric {
			var got []string
			for _, l := range s.Label {
				got = append(got, l.GetName())
			}
			want := slices.Clone(m.labels)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s: labels %v, documented %v", m.name, got, want)
				break
			}
		}
	}
}

// TestCorefileMetricsScrape runs kubeadm's Corefile from a manifests file and
// makes every documented metric happen: queries of the cluster, forwarded
// ones and cached ones, an upstream that is down (its probes fail), an
// EndpointSlice change with a trigger time (DNS programming). Then every
// metric of the docs' table must be on /metrics with its labels, and
// CoreDNS's label values where CoreDNS fixes them.
func TestCorefileMetricsScrape(t *testing.T) {
	p := freePorts(t)
	dead, good := deadUDP(t), fakeResolver(t)
	conf := kubeadmCorefile(t, p, dead+" "+good)
	conf = strings.Replace(conf, "max_concurrent 1000", "max_concurrent 1000\n       policy sequential", 1)
	dir := t.TempDir()
	services := writeServices(t, dir)
	path := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startCorefile(t, p, path, "--services", services)

	d.ask(t, "web.default.svc.cluster.local.", dns.TypeA)
	d.ask(t, "upstream.example.", dns.TypeA) // the dead upstream fails once
	d.ask(t, "upstream.example.", dns.TypeA) // a cache hit
	d.ask(t, "nx.example.", dns.TypeA)       // fails twice: marked down, then probed
	// An EndpointSlice change triggered now, as the controller stamps it.
	changed := strings.Replace(testServices, "labels: {kubernetes.io/service-name: web}}",
		fmt.Sprintf("labels: {kubernetes.io/service-name: web}, annotations: {endpoints.kubernetes.io/last-change-trigger-time: %q}}",
			time.Now().UTC().Format(time.RFC3339Nano)), 1)
	if err := os.WriteFile(services, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}

	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(20 * time.Second)
	for {
		fams = scrapeFamilies(t, p.metrics)
		if fams["coredns_kubernetes_dns_programming_duration_seconds"] != nil && fams["coredns_proxy_healthcheck_failures_total"] != nil &&
			fams["coredns_health_request_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the programming, health-check and self-check metrics never came\n%s", d.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkDocMetrics(t, fams, false)
	checkLikeCoreDNS(t, fams)

	value := func(name string, labels map[string]string) float64 {
		t.Helper()
	next:
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.Label {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
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
	server := fmt.Sprintf("dns://127.0.0.1:%d", p.dns)
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64 // -1: present with any value
	}{
		{"coredns_dns_requests_total", map[string]string{"server": server, "zone": ".", "view": "", "proto": "udp", "family": "1", "type": "A"}, 4},
		{"coredns_dns_responses_total", map[string]string{"rcode": "NOERROR", "plugin": "errors"}, 3},
		{"coredns_dns_responses_total", map[string]string{"rcode": "NXDOMAIN", "plugin": "errors"}, 1},
		{"coredns_cache_requests_total", map[string]string{"server": server, "zones": "."}, 4},
		{"coredns_cache_hits_total", map[string]string{"type": "success"}, 1},
		{"coredns_cache_misses_total", nil, 3},
		{"coredns_cache_entries", map[string]string{"type": "success"}, 1},
		{"coredns_cache_entries", map[string]string{"type": "denial"}, 1},
		{"coredns_plugin_enabled", map[string]string{"server": server, "name": "kubernetes"}, 1},
		{"coredns_proxy_request_duration_seconds", map[string]string{"proxy_name": "forward", "to": good, "rcode": "NOERROR"}, 1},
		{"coredns_proxy_healthcheck_failures_total", map[string]string{"proxy_name": "forward", "to": dead}, -1},
		{"coredns_kubernetes_dns_programming_duration_seconds", map[string]string{"service_kind": "cluster_ip"}, 1},
		{"clusterdns_forward_upstream_healthy", map[string]string{"upstream": dead}, 0},
		{"coredns_reload_failed_total", nil, 0},
	} {
		got := value(tt.name, tt.labels)
		if (tt.want < 0 && got < 0) || (tt.want >= 0 && got != tt.want) {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if names := pluginNames(fams); !slices.Equal(names, []string{"cache", "errors", "forward", "kubernetes", "loadbalance", "loop", "prometheus"}) {
		t.Errorf("coredns_plugin_enabled names %v, want kubeadm's chain", names)
	}
}

// coreDNSNotExported are CoreDNS v1.14.6's families clusterdns does not
// have, as docs/operations.md lists them: what a refused option or plugin
// counts, and what the hosts and local plugins register whatever the
// Corefile says.
var coreDNSNotExported = strings.Fields("coredns_proxy_conn_cache_hits_total coredns_cache_prefetch_total " +
	"coredns_cache_served_stale_total coredns_cache_drops_total coredns_hosts_reload_timestamp_seconds " +
	"coredns_hosts_entries coredns_local_localhost_requests_total")

// coreDNSNotRecorded are CoreDNS v1.14.6's families that clusterdns has and
// the recording of CoreDNS (coreDNSMetricsFile) lacks, because nothing
// made them there; each with where CoreDNS defines it.
var coreDNSNotRecorded = map[string]string{
	"coredns_cache_evictions_total":                       "plugin/cache/metrics.go: an entry pushed out of a full cache",
	"coredns_dns_do_requests_total":                       "plugin/metrics/vars/vars.go: a query with DO",
	"coredns_proxy_healthcheck_failures_total":            "plugin/pkg/proxy/metrics.go: a failed probe of an upstream",
	"coredns_kubernetes_dns_programming_duration_seconds": "plugin/kubernetes/object/metrics.go: an EndpointSlice from an API server",
	"coredns_reload_version_info":                         "plugin/reload/metrics.go: set once a changed Corefile was read",
}

// checkLikeCoreDNS holds clusterdns's coredns_* families to CoreDNS's own,
// as coreDNSMetricsFile recorded them from the real CoreDNS v1.14.6 on the
// same Corefile: each of CoreDNS's is here (or documented as not
// exported) with its type and label names, and each coredns_* family here
// is CoreDNS's.
func checkLikeCoreDNS(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	recorded := coreDNSMetrics(t)
	if len(recorded) < 20 {
		t.Fatalf("%s: %d families", coreDNSMetricsFile, len(recorded))
	}
	for name, rf := range recorded {
		f := fams[name]
		switch {
		case f == nil && !slices.Contains(coreDNSNotExported, name):
			t.Errorf("%s: CoreDNS v1.14.6 exports it, clusterdns does not", name)
		case f != nil && (f.GetType() != rf.GetType() || !slices.Equal(labelNames(f), labelNames(rf))):
			t.Errorf("%s: %v %v, CoreDNS v1.14.6's %v %v", name, f.GetType(), labelNames(f), rf.GetType(), labelNames(rf))
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "coredns_") && recorded[name] == nil && coreDNSNotRecorded[name] == "" &&
			!strings.HasPrefix(name, "coredns_kubernetes_rest_client_") {
			t.Errorf("%s: a coredns_ name CoreDNS v1.14.6 does not export", name)
		}
	}
}

func pluginNames(fams map[string]*dto.MetricFamily) []string {
	var out []string
	for _, m := range fams["coredns_plugin_enabled"].GetMetric() {
		for _, l := range m.Label {
			if l.GetName() == "name" {
				out = append(out, l.GetValue())
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestCorefileMetricsScrapeAPIServer: from a real API server, the API
// client's metrics (CoreDNS's coredns_kubernetes_rest_client_*) and the DNS
// programming time of a slice created with a trigger time.
func TestCorefileMetricsScrapeAPIServer(t *testing.T) {
	srv := kapitest.Start(t)
	p := freePorts(t)
	path := filepath.Join(t.TempDir(), "Corefile")
	if err := os.WriteFile(path, []byte(kubeadmCorefile(t, p, fakeResolver(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startCorefile(t, p, path, "--kubeconfig", srv.Kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := srv.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{ClusterIP: "198.18.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port, name := int32(8080), "http"
	if _, err := srv.Client.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"},
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.19.0.5"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if a := d.ask(t, "198-19-0-5.web.default.svc.cluster.local.", dns.TypeA).Answer; len(a) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint's name never answered\n%s", d.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fams := scrapeFamilies(t, p.metrics)
	checkDocMetrics(t, fams, true)
	if fams["coredns_kubernetes_dns_programming_duration_seconds"] == nil {
		t.Error("no coredns_kubernetes_dns_programming_duration_seconds for the slice created with a trigger time")
	}
}

// deadUDP is a loopback UDP address where nothing listens.
func deadUDP(t *testing.T) string {
	t.Helper()
	pc, ln, err := listenBoth()
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	ln.Close()
	return addr
}
