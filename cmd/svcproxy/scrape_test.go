package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// scrapeManifests: web has internalTrafficPolicy Local and its one endpoint
// on another node (kubeproxy_sync_proxy_rules_no_local_endpoints_total
// {traffic_policy="internal"} is 1 on node-a).
const scrapeManifests = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 198.18.0.10
  internalTrafficPolicy: Local
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: ["198.19.1.10"], nodeName: node-b, conditions: {ready: true}}]
`

// svcproxyProcess is the test binary running as svcproxy in a namespace of
// its own (TestHelperSvcproxy), its HTTP servers listening.
type svcproxyProcess struct {
	ns  *netnstest.NS
	log string // up to the readiness signal
}

// runSvcproxy runs svcproxy with args in a new namespace and returns once
// both its HTTP servers listen (startServing).
func runSvcproxy(t *testing.T, args ...string) *svcproxyProcess {
	t.Helper()
	ns := netnstest.New(t)
	lines, _, _ := startServing(t, ns, args...)
	return &svcproxyProcess{ns: ns, log: strings.Join(lines, "\n")}
}

// get makes one GET inside the namespace and returns the status and body.
func (p *svcproxyProcess) get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	code, body, err := getStatusIn(p.ns, addr, path)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

// waitHealthz polls /healthz until it answers want with the rules healthy
// (its body's "healthy"), the readiness signal of a first sync; it fails the
// test after a minute.
func (p *svcproxyProcess) waitHealthz(t *testing.T, want int) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := p.get(t, "127.0.0.1:10256", "/healthz")
		var h healthBody
		if code == want && json.Unmarshal([]byte(body), &h) == nil && h.Healthy {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still %d %s after a minute, want %d; log:\n%s", code, body, want, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metrics scrapes /metrics and parses it with Prometheus' own text parser.
func (p *svcproxyProcess) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	code, text := p.get(t, "127.0.0.1:10249", "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, text)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// sample is the value of name's series with the labels given (counter or
// gauge), and whether there is one.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// A running svcproxy serves every kube-proxy metric that
// kubeProxyMetrics (and so docs/operations.md) says it exports, in each mode
// this kernel has (ipvs and hybrid/ipvs run in test/vm's VM), with the
// labels kube-proxy gives them; /healthz and /livez are counted as they answer.
func TestKubeProxyMetricsScrape(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save", "nft")
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(scrapeManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"userspace", "iptables", "nftables", "hybrid/nftables", "hybrid/iptables"} {
		t.Run(strings.ReplaceAll(mode, "/", "-"), func(t *testing.T) {
			args := []string{"--services", file, "--hostname-override", "node-a"}
			if m, offload, ok := strings.Cut(mode, "/"); ok {
				args = append(args, "--mode", m, "--offload", offload)
			} else {
				args = append(args, "--mode", mode)
			}
			if mode == "nftables" { // the localhost NodePorts' metrics need a loopback entry
				args = append(args, "--nodeport-addresses", "localhost")
			}
			p := runSvcproxy(t, args...)
			p.waitHealthz(t, http.StatusOK)
			if code, body := p.get(t, "127.0.0.1:10256", "/livez"); code != http.StatusOK {
				t.Errorf("/livez = %d %s, want 200 while the rules keep up", code, body)
			}
			fams := p.metrics(t)
			for _, m := range kubeProxyMetrics {
				if !contains(m.modes, mode) {
					continue
				}
				f := fams[m.name]
				if f == nil {
					t.Errorf("/metrics lacks %s", m.name)
					continue
				}
				if want := m.kind; strings.ToLower(f.GetType().String()) != want {
					t.Errorf("%s is a %s, want kube-proxy's %s", m.name, f.GetType(), want)
				}
				for _, l := range strings.Split(m.labels, ", ") {
					if l != "" && !hasLabel(f, l) {
						t.Errorf("%s has no label %s (kube-proxy's: %s)", m.name, l, m.labels)
					}
				}
			}
			for _, c := range []struct {
				name   string
				labels map[string]string
				min    float64
			}{
				{"kubeproxy_proxy_healthz_total", map[string]string{"code": "200"}, 1},
				{"kubeproxy_proxy_livez_total", map[string]string{"code": "200"}, 1},
				{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", map[string]string{"traffic_policy": "internal", "ip_family": "IPv4"}, 1},
				{"kubeproxy_sync_proxy_rules_service_changes_total", nil, 1},  // web
				{"kubeproxy_sync_proxy_rules_endpoint_changes_total", nil, 1}, // its endpoints
			} {
				if v, ok := sample(fams, c.name, c.labels); !ok || v < c.min {
					t.Errorf("%s%v = %v (present %v), want at least %v", c.name, c.labels, v, ok, c.min)
				}
			}
			// The file's one version is synced (/healthz said so): nothing waits.
			for _, name := range []string{"kubeproxy_sync_proxy_rules_service_changes_pending", "kubeproxy_sync_proxy_rules_endpoint_changes_pending"} {
				if v, ok := sample(fams, name, nil); !ok || v != 0 {
					t.Errorf("%s = %v (present %v), want 0 once the file is synced", name, v, ok)
				}
			}
			if t.Failed() {
				t.Logf("svcproxy log:\n%s", p.log)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func hasLabel(f *dto.MetricFamily, name string) bool {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return true
			}
		}
	}
	return false
}

// healthBody is the part of /healthz's body the tests read.
type healthBody struct {
	NodeEligible *bool `json:"nodeEligible"`
	Healthy      bool  `json:"healthy"`
}

func parseHealth(t *testing.T, body string) healthBody {
	t.Helper()
	var h healthBody
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("/healthz body %q: %v", body, err)
	}
	return h
}

// kube-proxy's node eligibility, through a real svcproxy fed by a manifests
// file with this node's Node document: /healthz answers 503 while the Node is being deleted
// or carries the cluster autoscaler's taint (nodeEligible false, the rules
// still healthy), /livez 200 all the while, and both answers are counted.
func TestHealthzNodeEligible(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save")
	cases := []struct {
		name, node string
		healthz    int
	}{
		{"ready", `{name: node-a}`, http.StatusOK},
		{"being deleted", `{name: node-a, deletionTimestamp: "2026-12-03T08:00:00Z", finalizers: [example.com/hold]}`, http.StatusServiceUnavailable},
		{"tainted ToBeDeletedByClusterAutoscaler", `{name: node-a}
spec:
  taints: [{key: ToBeDeletedByClusterAutoscaler, value: "1764748800", effect: NoSchedule}]`, http.StatusServiceUnavailable},
		{"another node deleted", `{name: node-b, deletionTimestamp: "2026-12-03T08:00:00Z", finalizers: [example.com/hold]}`, http.StatusOK},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "-"), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "services.yaml")
			manifests := scrapeManifests + "---\napiVersion: v1\nkind: Node\nmetadata: " + c.node + "\n"
			if err := os.WriteFile(file, []byte(manifests), 0o644); err != nil {
				t.Fatal(err)
			}
			p := runSvcproxy(t, "--mode", "iptables", "--services", file, "--hostname-override", "node-a")
			body := p.waitHealthz(t, c.healthz)
			h := parseHealth(t, body)
			if eligible := c.healthz == http.StatusOK; h.NodeEligible == nil || *h.NodeEligible != eligible || !h.Healthy {
				t.Errorf("/healthz body %s: want nodeEligible %v and healthy true (the rules are)", body, eligible)
			}
			if code, body := p.get(t, "127.0.0.1:10256", "/livez"); code != http.StatusOK {
				t.Errorf("/livez = %d %s, want 200: the node's state is not the proxy's liveness", code, body)
			}
			fams := p.metrics(t)
			code := fmt.Sprint(c.healthz)
			if v, ok := sample(fams, "kubeproxy_proxy_healthz_total", map[string]string{"code": code}); !ok || v < 1 {
				t.Errorf("kubeproxy_proxy_healthz_total{code=%q} = %v, want at least 1", code, v)
			}
			if v, _ := sample(fams, "kubeproxy_proxy_livez_total", map[string]string{"code": "200"}); v != 1 {
				t.Errorf(`kubeproxy_proxy_livez_total{code="200"} = %v, want 1 (one /livez)`, v)
			}
			if t.Failed() {
				t.Logf("svcproxy log:\n%s", p.log)
			}
		})
	}
}

// kubeproxy_network_programming_duration_seconds through a real svcproxy: an
// EndpointSlice that changes with a last-change-trigger-time after svcproxy
// started is observed once the sync that applies it ends, as kube-proxy does.
func TestNetworkProgrammingScrape(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save")
	dir := t.TempDir()
	file := filepath.Join(dir, "services.yaml")
	write := func(text string) {
		t.Helper()
		tmp := filepath.Join(dir, "next.yaml")
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil { // svcproxy reads whole files only
			t.Fatal(err)
		}
	}
	write(scrapeManifests)
	p := runSvcproxy(t, "--mode", "iptables", "--services", file, "--hostname-override", "node-a")
	p.waitHealthz(t, http.StatusOK)
	const name = "kubeproxy_network_programming_duration_seconds"
	count := func() uint64 {
		f := p.metrics(t)[name]
		if f == nil || len(f.GetMetric()) == 0 {
			t.Fatalf("/metrics lacks %s", name)
		}
		return f.GetMetric()[0].GetHistogram().GetSampleCount()
	}
	if n := count(); n != 0 {
		t.Fatalf("%s has %d samples before any slice changed, want 0", name, n)
	}
	trigger := time.Now().UTC().Format(time.RFC3339Nano)
	changed := strings.Replace(scrapeManifests, "metadata: {name: web-1, namespace: default,",
		"metadata: {name: web-1, namespace: default, annotations: {endpoints.kubernetes.io/last-change-trigger-time: \""+trigger+"\"},", 1)
	changed = strings.Replace(changed, `"198.19.1.10"`, `"198.19.1.20"`, 1)
	write(changed)
	deadline := time.Now().Add(time.Minute)
	for count() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no sample a minute after the slice changed; log:\n%s", name, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := count(); n != 1 {
		t.Errorf("%s: %d samples, want 1 (one slice change)", name, n)
	}
}
