package healthcheck

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/svcproxy/svcproxy/service"
)

// The answers of /healthz and /livez, as kube-proxy's ProxyHealthServer
// gives them (its healthcheck_test.go TestHealthzServer and
// TestLivezServer): the node's state matters to /healthz only, the rules'
// lag to both, and every answer is counted by its code.
func TestProxyHealth(t *testing.T) {
	lagging := errors.New("the rules lag the Snapshot by 61s (bound 1m0s)")
	failed := errors.New("last sync failed (1 in a row): iptables-restore: exit status 1")
	cases := []struct {
		name           string
		node           *service.Node
		healthy, lag   error
		healthz, livez int
		eligible       bool
	}{
		{"no Node object: eligible", nil, nil, nil, 200, 200, true},
		{"node ready", &service.Node{Name: "node-a"}, nil, nil, 200, 200, true},
		{"node deleting", &service.Node{Name: "node-a", Deleting: true}, nil, nil, 503, 200, false},
		{"node tainted by the autoscaler", &service.Node{Name: "node-a", ToBeDeleted: true}, nil, nil, 503, 200, false},
		{"last sync failed, not late yet", &service.Node{Name: "node-a"}, failed, nil, 503, 200, true},
		{"rules lag", &service.Node{Name: "node-a"}, lagging, lagging, 503, 503, true},
		{"rules lag on a deleting node", &service.Node{Name: "node-a", Deleting: true}, lagging, lagging, 503, 503, false},
	}
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	synced := now.Add(-10 * time.Second)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := NewProxy(ProxyConfig{
				Families:    []Family{{Name: "IPv4", Healthy: func() error { return c.healthy }, Lag: func() error { return c.lag }}},
				LastUpdated: func() time.Time { return synced },
				Now:         func() time.Time { return now },
			})
			p.SetNode(c.node)

			code, hdr, h := serve(t, p.ServeHealthz)
			if code != c.healthz {
				t.Errorf("/healthz = %d, want %d (%+v)", code, c.healthz, h)
			}
			if h.NodeEligible == nil || *h.NodeEligible != c.eligible {
				t.Errorf("/healthz nodeEligible = %v, want %v", h.NodeEligible, c.eligible)
			}
			// kube-proxy: "healthy" is the rules' health; the node's is nodeEligible.
			if h.Healthy != (c.healthy == nil) || h.Status["IPv4"].Healthy != (c.healthy == nil) {
				t.Errorf("/healthz body %+v: want healthy and IPv4 healthy %v", h, c.healthy == nil)
			}
			checkHeaders(t, hdr)
			// kube-proxy: lastUpdated is "now" while healthy, the last sync otherwise.
			if want := map[bool]time.Time{true: now, false: synced}[code == 200]; !h.LastUpdated.Equal(want) {
				t.Errorf("/healthz lastUpdated = %s, want %s", h.LastUpdated, want)
			}

			code, hdr, h = serve(t, p.ServeLivez)
			if code != c.livez {
				t.Errorf("/livez = %d, want %d (%+v)", code, c.livez, h)
			}
			if h.NodeEligible != nil {
				t.Errorf("/livez has nodeEligible: kube-proxy gives it on /healthz only")
			}
			checkHeaders(t, hdr)

			for _, m := range []struct {
				name string
				vec  float64
				code int
			}{
				{"healthz", value(t, p.healthz.WithLabelValues("200")) + 2*value(t, p.healthz.WithLabelValues("503")), c.healthz},
				{"livez", value(t, p.livez.WithLabelValues("200")) + 2*value(t, p.livez.WithLabelValues("503")), c.livez},
			} {
				// One answer each: 1 when it was a 200, 2 when a 503.
				if want := map[int]float64{200: 1, 503: 2}[m.code]; m.vec != want {
					t.Errorf("kubeproxy_proxy_%s_total: 200+2*503 = %v, want %v (one %d)", m.name, m.vec, want, m.code)
				}
			}
			if err := p.Healthy(); (err == nil) != (c.healthz == 200) {
				t.Errorf("Healthy() = %v, want nil only when /healthz is 200", err)
			}
		})
	}
}

// The counters are kube-proxy's names with both codes present from the start.
func TestProxyHealthMetrics(t *testing.T) {
	p := NewProxy(ProxyConfig{Families: []Family{{Name: "IPv4", Healthy: func() error { return nil }, Lag: func() error { return nil }}}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(p)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range fams {
		got[f.GetName()] = len(f.GetMetric())
	}
	for _, name := range []string{"kubeproxy_proxy_healthz_total", "kubeproxy_proxy_livez_total"} {
		if got[name] != 2 {
			t.Errorf("%s: %d series, want 2 (codes 200 and 503)", name, got[name])
		}
	}
}

// value is a counter's value now.
func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func serve(t *testing.T, h http.HandlerFunc) (int, http.Header, Health) {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest("GET", "/", nil))
	var body Health
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	return rec.Code, rec.Header(), body
}

func checkHeaders(t *testing.T, h http.Header) {
	t.Helper()
	if h.Get("Content-Type") != "application/json" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v, want kube-proxy's Content-Type application/json and X-Content-Type-Options nosniff", h)
	}
}
