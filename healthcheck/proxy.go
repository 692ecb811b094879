package healthcheck

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/service"
)

// ProxyConfig configures a Proxy.
type ProxyConfig struct {
	// Families are the IP families the proxy serves, IPv4 first.
	Families []Family
	// LastUpdated is when the rules last matched a Snapshot; zero: never.
	LastUpdated func() time.Time
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Family is one IP family's rules, as the proxy's health sees them.
type Family struct {
	// Name is "IPv4" or "IPv6" (kube-proxy's v1.IPFamily).
	Name string
	// Healthy is nil while the family's rules serve the latest Snapshot
	// (dataplane.Interface.Healthy): what /healthz asks of the rules.
	Healthy func() error
	// Lag is nil while no Snapshot has waited too long to be applied
	// (dataplane.Interface.Lag): what /livez asks.
	Lag func() error
}

// Proxy is the proxy's own health: /healthz and /livez on
// --healthz-bind-address, as kube-proxy's ProxyHealthServer
// (pkg/proxy/healthcheck/proxy_health.go at v1.37.2) answers them (KEP-3836):
//
//   - /livez is 200 while every family's rules keep up with the Snapshots
//     (Family.Lag), 503 otherwise: a liveness probe restarts a proxy that is
//     stuck, not one whose node is going away.
//   - /healthz is 200 while /livez would be, the rules serve the latest
//     Snapshot (Family.Healthy: svcproxy also waits for the first sync and
//     fails while the last sync failed), and this node is eligible
//     (NodeEligible): a load balancer that polls it drains a node that is
//     being deleted or that the cluster autoscaler is about to remove.
//
// Both answer kube-proxy's JSON body and headers, and each answer is counted
// by its code, under kube-proxy's names: kubeproxy_proxy_healthz_total and
// kubeproxy_proxy_livez_total (pkg/proxy/metrics). A Proxy is a
// prometheus.Collector of the two.
type Proxy struct {
	cfg  ProxyConfig
	node atomic.Pointer[service.Node]

	healthz, livez *prometheus.CounterVec
}

// NewProxy returns a Proxy that knows no Node yet.
func NewProxy(cfg ProxyConfig) *Proxy {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LastUpdated == nil {
		cfg.LastUpdated = func() time.Time { return time.Time{} }
	}
	p := &Proxy{cfg: cfg,
		healthz: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubeproxy_proxy_healthz_total", Help: "Cumulative proxy healthz HTTP status",
		}, []string{"code"}),
		livez: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubeproxy_proxy_livez_total", Help: "Cumulative proxy livez HTTP status",
		}, []string{"code"}),
	}
	for _, code := range []string{"200", "503"} { // both series from the start, at 0
		p.healthz.WithLabelValues(code)
		p.livez.WithLabelValues(code)
	}
	return p
}

// SetNode records this node as the latest Snapshot describes it
// (service.Snapshot.Node); nil when the source has no Node object for it.
func (p *Proxy) SetNode(n *service.Node) { p.node.Store(n) }

// NodeEligible is false while this node's Node object has a deletionTimestamp
// or the cluster autoscaler's ToBeDeletedByClusterAutoscaler taint
// (kube-proxy's ProxyHealthServer.NodeEligible). A node svcproxy has no Node
// object for is eligible: kube-proxy answers false until its Node informer has
// seen the Node (it waits up to 30 s for it at start), but svcproxy's
// manifests file may have no Node document at all, and a proxy that never
// becomes healthy for that would be wrong.
func (p *Proxy) NodeEligible() bool {
	n := p.node.Load()
	return n == nil || (!n.Deleting && !n.ToBeDeleted)
}

// ProxierHealth is one family's part of the body (kube-proxy's ProxierHealth,
// with svcproxy's reason when it is not healthy).
type ProxierHealth struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
	Reason      string    `json:"reason,omitempty"`
}

// Health is the body of /healthz and /livez: kube-proxy's ProxyHealth
// (lastUpdated, currentTime, nodeEligible on /healthz only, healthy, status
// per family), with svcproxy's reason when it is not healthy.
type Health struct {
	LastUpdated  time.Time                `json:"lastUpdated"`
	CurrentTime  time.Time                `json:"currentTime"`
	NodeEligible *bool                    `json:"nodeEligible,omitempty"`
	Healthy      bool                     `json:"healthy"`
	Status       map[string]ProxierHealth `json:"status,omitempty"`
	Reason       string                   `json:"reason,omitempty"`
}

// health asks each family: with ready, the /healthz question (Healthy),
// otherwise the /livez one (Lag).
func (p *Proxy) health(ready bool) Health {
	h := Health{LastUpdated: p.cfg.LastUpdated(), CurrentTime: p.cfg.Now(), Healthy: true, Status: map[string]ProxierHealth{}}
	for _, f := range p.cfg.Families {
		err := f.Lag()
		if ready && err == nil {
			err = f.Healthy()
		}
		ph := ProxierHealth{LastUpdated: h.LastUpdated, Healthy: err == nil}
		if err != nil {
			ph.Reason = err.Error()
			h.Healthy = false
			if h.Reason == "" {
				h.Reason = ph.Reason
			}
		}
		h.Status[f.Name] = ph
	}
	return h
}

// Healthy is what /healthz answers, without counting an answer: nil, or why
// not.
func (p *Proxy) Healthy() error {
	h := p.health(true)
	switch {
	case !h.Healthy:
		return reason(h.Reason)
	case !p.NodeEligible():
		return reason(notEligible)
	}
	return nil
}

const notEligible = "node is being deleted or is tainted ToBeDeletedByClusterAutoscaler"

type reason string

func (r reason) Error() string { return string(r) }

// ServeHealthz answers /healthz (kube-proxy's healthzHandler).
func (p *Proxy) ServeHealthz(w http.ResponseWriter, _ *http.Request) {
	h := p.health(true)
	eligible := p.NodeEligible()
	h.NodeEligible = &eligible
	if h.Healthy && !eligible {
		h.Reason = notEligible
	}
	p.answer(w, p.healthz, h, h.Healthy && eligible)
}

// ServeLivez answers /livez (kube-proxy's livezHandler).
func (p *Proxy) ServeLivez(w http.ResponseWriter, _ *http.Request) {
	h := p.health(false)
	p.answer(w, p.livez, h, h.Healthy)
}

func (p *Proxy) answer(w http.ResponseWriter, count *prometheus.CounterVec, h Health, ok bool) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !ok {
		count.WithLabelValues("503").Inc()
		w.WriteHeader(http.StatusServiceUnavailable)
	} else {
		count.WithLabelValues("200").Inc()
		w.WriteHeader(http.StatusOK)
		// kube-proxy: "the returned lastUpdated value is 'recent' if the
		// server is healthy", as it was when it meant the last sync loop run.
		h.LastUpdated = h.CurrentTime
	}
	_ = json.NewEncoder(w).Encode(h)
}

// Describe implements prometheus.Collector.
func (p *Proxy) Describe(ch chan<- *prometheus.Desc) {
	p.healthz.Describe(ch)
	p.livez.Describe(ch)
}

// Collect implements prometheus.Collector.
func (p *Proxy) Collect(ch chan<- prometheus.Metric) {
	p.healthz.Collect(ch)
	p.livez.Collect(ch)
}
