package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/svcproxy/svcproxy/internal/k8sbin"
)

// TestMetricsLikeCoreDNS runs the real CoreDNS v1.14.6 (built by
// internal/k8sbin, the version kubeadm v1.37.2 deploys) beside clusterdns,
// each on kubeadm's Corefile, asks both the same forwarded questions, and
// compares their /metrics: every coredns_* family both have carries the
// same label names, the series of these questions the same label values
// (but server and to, whose ports differ), and the counts agree. A family
// only CoreDNS has must be one docs/operations.md says clusterdns does not
// export. CoreDNS has no API server here (its kubernetes plugin serves
// unsynced); clusterdns reads a manifests file: only forwarded names are
// compared.
func TestMetricsLikeCoreDNS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bins, err := k8sbin.Build(ctx, k8sbin.Config{CoreDNS: true, CachedOnly: true})
	if errors.Is(err, k8sbin.ErrNotBuilt) || errors.Is(err, k8sbin.ErrUnavailable) {
		t.Skipf("needs CoreDNS v1.14.6 in the cache: ./test/kapi/build.sh -coredns (%v)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	upstream := fakeResolver(t)
	dir := t.TempDir()

	// CoreDNS, its kubernetes plugin pointed at an API server that is not
	// there.
	cp := freePorts(t)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
`), 0o600); err != nil {
		t.Fatal(err)
	}
	coreConf := strings.Replace(kubeadmCorefile(t, cp, upstream), "ttl 30\n", "ttl 30\n       kubeconfig "+kubeconfig+"\n", 1)
	corePath := filepath.Join(dir, "Corefile.coredns")
	if err := os.WriteFile(corePath, []byte(coreConf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins.CoreDNS, "-conf", corePath)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("CoreDNS's output:\n%s", out.String())
		}
	})
	core := &daemonRun{p: cp, logs: &out}
	core.waitHTTP(t, cp.health, "/health", "OK") // unsynced, it never says ready
	// Its servers start once the kubernetes plugin gives up waiting for its
	// API server (startup_timeout, 5s); the probe's question is another's.
	c := &dns.Client{Timeout: time.Second}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, _, err := c.Exchange(new(dns.Msg).SetQuestion("probe.example.", dns.TypeTXT), fmt.Sprintf("127.0.0.1:%d", cp.dns)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CoreDNS never answered:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	// clusterdns on the same Corefile, Services from a file.
	sp := freePorts(t)
	services := writeServices(t, dir)
	ourPath := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(ourPath, []byte(kubeadmCorefile(t, sp, upstream)), 0o644); err != nil {
		t.Fatal(err)
	}
	ours := startCorefile(t, sp, ourPath, "--services", services)

	// CoreDNS's loop plugin asks its own server a HINFO question once it
	// listens (trying every second for 30 s): wait until it is counted, so
	// that both servers have had the same questions before the scrape.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if slices.ContainsFunc(series(scrapeFamilies(t, cp.metrics)["coredns_dns_requests_total"]), func(s string) bool {
			return strings.Contains(s, "type=other")
		}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CoreDNS's loop probe never counted:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	ours.ask(t, "probe.example.", dns.TypeTXT) // as CoreDNS was asked
	// CoreDNS's loop plugin asks itself a HINFO question for a random name
	// at start, which its metrics count; clusterdns probes its upstreams
	// directly. Ask clusterdns one as well.
	ours.ask(t, "1234567890.9876543210.", dns.TypeHINFO)
	for _, d := range []*daemonRun{core, ours} {
		d.ask(t, "upstream.example.", dns.TypeA)
		d.ask(t, "upstream.example.", dns.TypeA) // a cache hit
		d.ask(t, "nx.example.", dns.TypeA)
		d.ask(t, "nx.example.", dns.TypeAAAA)
	}
	want, got := scrapeFamilies(t, cp.metrics), scrapeFamilies(t, sp.metrics)
	if *updateCoreDNSMetrics {
		writeCoreDNSMetrics(t, want)
	}
	// The recording the tests without CoreDNS read is what CoreDNS says.
	recorded := coreDNSMetrics(t)
	for name, wf := range want {
		if !strings.HasPrefix(name, "coredns_") || strings.HasPrefix(name, "coredns_kubernetes_rest_client_") {
			continue
		}
		rf := recorded[name]
		switch {
		case rf == nil:
			t.Errorf("%s: CoreDNS has it, %s does not (go test -run TestMetricsLikeCoreDNS -update-coredns-metrics)", name, coreDNSMetricsFile)
		case rf.GetType() != wf.GetType() || !slices.Equal(labelNames(rf), labelNames(wf)):
			t.Errorf("%s: %s says %v %v, CoreDNS %v %v", name, coreDNSMetricsFile, rf.GetType(), labelNames(rf), wf.GetType(), labelNames(wf))
		}
	}

	for name, wf := range want {
		if !strings.HasPrefix(name, "coredns_") {
			continue
		}
		gf := got[name]
		if gf == nil {
			if !slices.Contains(coreDNSNotExported, name) && !strings.HasPrefix(name, "coredns_kubernetes_rest_client_") {
				t.Errorf("%s: CoreDNS has it, clusterdns does not", name)
			}
			continue
		}
		if wf.GetType() != gf.GetType() {
			t.Errorf("%s: type %v, CoreDNS's %v", name, gf.GetType(), wf.GetType())
		}
		if w, g := labelNames(wf), labelNames(gf); !slices.Equal(w, g) {
			t.Errorf("%s: labels %v, CoreDNS's %v", name, g, w)
		}
	}
	// The questions' series, value for value.
	for _, name := range []string{"coredns_dns_requests_total", "coredns_dns_responses_total", "coredns_cache_requests_total",
		"coredns_cache_hits_total", "coredns_cache_misses_total", "coredns_proxy_request_duration_seconds", "coredns_dns_request_duration_seconds"} {
		w, g := series(want[name]), series(got[name])
		if !slices.Equal(w, g) {
			t.Errorf("%s:\n clusterdns %q\n CoreDNS    %q", name, g, w)
		}
	}
}

// coreDNSMetricsFile is CoreDNS v1.14.6's /metrics, its coredns_*
// families, as TestMetricsLikeCoreDNS scraped it: the names, types and
// labels TestCorefileMetricsScrape holds clusterdns's to when no CoreDNS
// is built.
const coreDNSMetricsFile = "testdata/coredns-v1.14.6.metrics"

var updateCoreDNSMetrics = flag.Bool("update-coredns-metrics", false,
	"TestMetricsLikeCoreDNS writes the real CoreDNS's /metrics to "+coreDNSMetricsFile)

// writeCoreDNSMetrics writes CoreDNS's coredns_* families (but the API
// client's, which depend on an API server) to coreDNSMetricsFile.
func writeCoreDNSMetrics(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# CoreDNS v1.14.6's /metrics (github.com/coredns/coredns, built by internal/k8sbin),\n" +
		"# its coredns_* families, on kubeadm v1.37.2's Corefile with an unreachable API server,\n" +
		"# after TestMetricsLikeCoreDNS's questions. Written by\n" +
		"#   go test ./cmd/clusterdns -run TestMetricsLikeCoreDNS -update-coredns-metrics\n")
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		if !strings.HasPrefix(name, "coredns_") || strings.HasPrefix(name, "coredns_kubernetes_rest_client_") {
			continue
		}
		if _, err := expfmt.MetricFamilyToText(&b, fams[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(coreDNSMetricsFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// coreDNSMetrics reads coreDNSMetricsFile with prometheus/common's text
// parser.
func coreDNSMetrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	f, err := os.Open(coreDNSMetricsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("%s: %v", coreDNSMetricsFile, err)
	}
	return fams
}

// labelNames are the label names a family's series have, sorted, once each.
func labelNames(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if !slices.Contains(out, l.GetName()) {
				out = append(out, l.GetName())
			}
		}
	}
	slices.Sort(out)
	return out
}

// series are a family's series with their values, server and to left out
// (their ports differ between the two servers), sorted.
func series(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		var ls []string
		for _, l := range m.Label {
			if l.GetName() != "server" && l.GetName() != "to" {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
		}
		v := 0.0
		switch {
		case m.Counter != nil:
			v = m.Counter.GetValue()
		case m.Histogram != nil:
			v = float64(m.Histogram.GetSampleCount())
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		}
		if v != 0 { // a series made ahead at zero is no difference
			out = append(out, fmt.Sprintf("{%s} %g", strings.Join(ls, ","), v))
		}
	}
	slices.Sort(out)
	return out
}
