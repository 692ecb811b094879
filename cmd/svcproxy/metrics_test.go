package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/hybrid/localhost"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	offloadiptables "github.com/svcproxy/svcproxy/offload/iptables"
	offloadnftables "github.com/svcproxy/svcproxy/offload/nftables"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

func testSnapshot() *service.Snapshot {
	s := &service.Service{
		NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"},
		Type:           service.TypeClusterIP,
		ClusterIPs:     []netip.Addr{netip.MustParseAddr("198.18.0.10")},
	}
	s.Ports = []*service.Port{{
		Name:      service.PortName{NamespacedName: s.NamespacedName, Port: "http", Protocol: service.TCP},
		Service:   s,
		Port:      80,
		Protocol:  service.TCP,
		Endpoints: []service.Endpoint{{Addr: netip.MustParseAddrPort("198.19.1.10:8080"), Ready: true, Serving: true}},
	}}
	return service.NewSnapshot([]*service.Service{s}, nil)
}

// scrape serves e's registry as /metrics does and parses the answer with
// Prometheus' own text parser.
func scrape(t *testing.T, e *endpoints) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(e.registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// /metrics is one client_golang registry: kube-proxy's sync metrics next to
// svcproxy's own, each mode's collector, the Go runtime's and the process's.
func TestMetricsScrape(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	modes := []struct {
		name string
		dp   func(t *testing.T) dataplane.Interface
		want []string
	}{
		{"userspace", func(t *testing.T) dataplane.Interface {
			d, err := userspace.New(userspace.Config{BindAddress: netip.MustParseAddr("127.0.0.1")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Proxier().Shutdown(context.Background()) })
			return d
		}, []string{"svcproxy_userspace_connections_total", "svcproxy_userspace_dial_failures_total"}},
		{"iptables", func(t *testing.T) dataplane.Interface {
			d, err := offloadiptables.New(offloadiptables.Config{IPTables: kiptables.NewFake()})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}, []string{"svcproxy_iptables_syncs_total", "svcproxy_iptables_restore_bytes", "svcproxy_conntrack_deleted_total"}},
		{"nftables with localhost NodePorts", func(t *testing.T) dataplane.Interface {
			d, err := offloadnftables.New(offloadnftables.Config{LocalhostNodePorts: true, NFT: knft.NewFake(offloadnftables.Table)})
			if err != nil {
				t.Fatal(err)
			}
			l, err := localhost.New(localhost.Config{Kernel: d, Node: dataplane.Node{Family: service.IPv4}, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Listeners().Shutdown(context.Background()) })
			return l
		}, []string{"svcproxy_nftables_syncs_total", "kubeproxy_nftables_localhost_nodeport_listeners",
			"kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total"}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dp := m.dp(t)
			e := newEndpoints(dp, log)
			if err := dp.Sync(context.Background(), testSnapshot()); err != nil {
				t.Fatal(err)
			}
			fams := scrape(t, e)
			for _, name := range append([]string{
				"kubeproxy_sync_proxy_rules_duration_seconds",
				"kubeproxy_sync_proxy_rules_last_timestamp_seconds",
				"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
				"kubeproxy_network_programming_duration_seconds",
				"svcproxy_sync_failures_total",
				"svcproxy_healthy",
				"go_goroutines",
				"process_open_fds",
			}, m.want...) {
				if fams[name] == nil {
					t.Errorf("/metrics lacks %s", name)
				}
			}
			if f := fams["kubeproxy_sync_proxy_rules_duration_seconds"]; f != nil {
				if n := f.Metric[0].GetHistogram().GetSampleCount(); n != 1 {
					t.Errorf("kubeproxy_sync_proxy_rules_duration_seconds: %d samples, want 1 (one sync)", n)
				}
			}
			if f := fams["svcproxy_healthy"]; f != nil {
				if v := f.Metric[0].GetGauge().GetValue(); v != 1 {
					t.Errorf("svcproxy_healthy = %v after a good sync, want 1", v)
				}
			}
		})
	}
}

// An endpoint that is svcproxy's own listener (healthz on
// every address, metrics on one) is refused; others pass.
func TestOwnListeners(t *testing.T) {
	cfg := &Config{HealthzAddr: "0.0.0.0:10256", MetricsAddr: "198.19.0.1:10249",
		NodeIPs: []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.2")}}
	o := newOwnListeners(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for addr, refused := range map[string]bool{
		"198.19.0.1:10249": true, "198.19.0.2:10256": true, "198.19.0.1:10256": true,
		"198.19.0.2:10249": false, "198.19.1.5:10256": false, "198.19.0.1:8080": false,
	} {
		why := o.why(service.Endpoint{Addr: netip.MustParseAddrPort(addr)})
		if (why != "") != refused {
			t.Errorf("%s: %q, want refused=%v", addr, why, refused)
		}
	}
}
