package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// kubeProxyMetric is one metric of kube-proxy's, and what svcproxy makes of it.
type kubeProxyMetric struct {
	name, kind, labels string // kube-proxy's name, type and labels
	kubeProxyModes     string // the modes kube-proxy registers it in (RegisterMetrics)
	// modes are svcproxy's modes that export it under that name, as
	// TestKubeProxyMetricsScrape runs them: "userspace", "iptables",
	// "nftables", "ipvs", and "hybrid/<offload>"; none: not exported.
	modes []string
	// note says how svcproxy's meaning differs, or, when modes is empty,
	// why svcproxy does not export it.
	note string
}

var (
	allModes    = []string{"userspace", "iptables", "nftables", "ipvs", "hybrid/nftables", "hybrid/iptables", "hybrid/ipvs"}
	ruleModes   = []string{"iptables", "nftables", "hybrid/nftables", "hybrid/iptables"}
	kernelModes = []string{"iptables", "nftables", "ipvs", "hybrid/nftables", "hybrid/iptables", "hybrid/ipvs"}
)

// kubeProxyMetrics is every metric kube-proxy v1.37.2 defines
// (pkg/proxy/metrics/metrics.go and metrics_linux.go), in its order: the one
// list that docs/operations.md's table is written from (TestKubeProxyMetricsDoc)
// and that the scrape of a running svcproxy is checked against
// (TestKubeProxyMetricsScrape).
var kubeProxyMetrics = []kubeProxyMetric{
	{"kubeproxy_sync_proxy_rules_duration_seconds", "histogram", "ip_family", "all", allModes,
		"userspace: the listeners and portals; hybrid: its kernel path's syncs"},
	{"kubeproxy_sync_full_proxy_rules_duration_seconds", "histogram", "ip_family", "iptables, nftables", ruleModes, ""},
	{"kubeproxy_sync_partial_proxy_rules_duration_seconds", "histogram", "ip_family", "iptables, nftables", ruleModes, ""},
	{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge", "ip_family", "all", allModes, ""},
	{"kubeproxy_network_programming_duration_seconds", "histogram", "ip_family", "all", allModes,
		"from the EndpointSlice's `endpoints.kubernetes.io/last-change-trigger-time` to the end of the sync that applied it, each slice change once, as kube-proxy; the time from a Snapshot's handover is `svcproxy_snapshot_programming_duration_seconds`"},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", "gauge", "", "all", allModes,
		"the EndpointSlice events (a manifests file: Services whose endpoints changed between loads) recorded after the latest Snapshot handed to the dataplane was built; kube-proxy counts slices with a change waiting, so two updates of one slice are one there, two here"},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_total", "counter", "", "all", allModes,
		"every EndpointSlice add, update and delete the informer delivers, as kube-proxy; a manifests file: each Service whose endpoints changed between two loads"},
	{"kubeproxy_sync_proxy_rules_service_changes_pending", "gauge", "", "all", allModes,
		"as the endpoint one, for Services (kube-proxy: Services with a change waiting)"},
	{"kubeproxy_sync_proxy_rules_service_changes_total", "counter", "", "all", allModes,
		"every Service add, update and delete the informer delivers, as kube-proxy; a manifests file: each Service added, removed or whose spec changed between two loads"},
	{"kubeproxy_iptables_ct_state_invalid_dropped_packets_total", "counter", "", "iptables", nil,
		"not exported: svcproxy writes no rule that drops conntrack INVALID packets (kube-proxy's, counted by nfacct), so there is nothing to count"},
	{"kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "counter", "ip_family", "iptables, ipvs",
		[]string{"iptables", "ipvs", "hybrid/iptables", "hybrid/ipvs"}, "ipvs: the masquerade rules' restores"},
	{"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", "counter", "ip_family", "iptables",
		[]string{"iptables", "hybrid/iptables"}, ""},
	{"kubeproxy_sync_proxy_rules_iptables_total", "gauge", "table, ip_family", "iptables", nil,
		"not exported: a partial sync writes only the changed ports' chains and svcproxy keeps no per-table rule count of the rest (it counts what it writes, in `svcproxy_iptables_restore_bytes`)"},
	{"kubeproxy_sync_proxy_rules_iptables_last", "gauge", "table, ip_family", "iptables", nil,
		"not exported: as above; `svcproxy_iptables_restore_bytes` is the size of the last restore instead"},
	{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "counter", "ip_family", "nftables",
		[]string{"nftables", "hybrid/nftables"}, ""},
	{"kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", "counter", "ip_family", "nftables", nil,
		"not exported: svcproxy deletes stale chains in the full sync's own transaction, not in a cleanup transaction of their own, so a failure there is a sync failure"},
	{"kubeproxy_proxy_healthz_total", "counter", "code", "all", allModes, ""},
	{"kubeproxy_proxy_livez_total", "counter", "code", "all", allModes, ""},
	{"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "gauge", "ip_family", "all", allModes, ""},
	{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", "gauge", "traffic_policy, ip_family", "all", allModes, ""},
	{"kubeproxy_sync_proxy_rules_winkernel_lb_create_failures_total", "counter", "ip_family, lb_type, error", "kernelspace", nil,
		"not exported: Windows (kernelspace mode) only"},
	{"kubeproxy_sync_proxy_rules_winkernel_lb_update_failures_total", "counter", "ip_family, lb_type, error", "kernelspace", nil,
		"not exported: Windows (kernelspace mode) only"},
	{"kubeproxy_sync_proxy_rules_winkernel_lb_delete_failures_total", "counter", "ip_family, lb_type, error", "kernelspace", nil,
		"not exported: Windows (kernelspace mode) only"},
	{"kubeproxy_iptables_localhost_nodeports_accepted_packets_total", "counter", "", "iptables", nil,
		"not exported: svcproxy never sets route_localnet (CVE-2020-8558), so iptables mode has no localhost NodePort rule to count"},
	{"kubeproxy_nftables_localhost_nodeport_listeners", "gauge", "ip_family", "nftables (KubeProxyNFTablesLocalhostNodePorts)", []string{"nftables"},
		"with a loopback entry in `--nodeport-addresses`, svcproxy's switch instead of the feature gate"},
	{"kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total", "counter", "ip_family", "nftables (KubeProxyNFTablesLocalhostNodePorts)", []string{"nftables"},
		"as above"},
	{"kubeproxy_nftables_localhost_nodeport_rejected_packets_total", "counter", "ip_family, protocol", "nftables (KubeProxyNFTablesLocalhostNodePorts)", []string{"nftables"},
		"as above"},
	{"kubeproxy_conntrack_reconciler_sync_duration_seconds", "histogram", "ip_family", "iptables, ipvs, nftables", kernelModes, ""},
	{"kubeproxy_conntrack_reconciler_deleted_entries_total", "counter", "ip_family", "iptables, ipvs, nftables", kernelModes,
		"the same count as `svcproxy_conntrack_deleted_total`"},
}

// The table's markers in docs/operations.md.
const (
	tableBegin = "<!-- kube-proxy metrics: begin. cmd/svcproxy's kubeProxyMetrics writes this table: go test ./cmd/svcproxy -run TestKubeProxyMetricsDoc -update -->\n"
	tableEnd   = "<!-- kube-proxy metrics: end -->\n"
)

var update = flag.Bool("update", false, "rewrite docs/operations.md's kube-proxy metrics table from kubeProxyMetrics")

// kubeProxyMetricsTable renders kubeProxyMetrics as docs/operations.md shows it.
func kubeProxyMetricsTable() string {
	var b strings.Builder
	b.WriteString("| kube-proxy v1.37.2 | type | labels | kube-proxy's modes | svcproxy |\n|---|---|---|---|---|\n")
	for _, m := range kubeProxyMetrics {
		svc := m.note
		if len(m.modes) > 0 {
			svc = "same name: " + strings.Join(m.modes, ", ")
			if m.note != "" {
				svc += "; " + m.note
			}
		}
		b.WriteString("| `" + m.name + "` | " + m.kind + " | " + m.labels + " | " + m.kubeProxyModes + " | " + svc + " |\n")
	}
	return b.String()
}

// The table in docs/operations.md is kubeProxyMetrics: the docs cannot say a
// name is exported that the scrape test does not check.
func TestKubeProxyMetricsDoc(t *testing.T) {
	const path = "../../docs/operations.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start, end := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if start < 0 || end < start {
		t.Fatalf("%s: no table between %q and %q", path, tableBegin, tableEnd)
	}
	want := kubeProxyMetricsTable()
	if got := doc[start+len(tableBegin) : end]; got != want {
		if !*update {
			t.Fatalf("%s: the kube-proxy metrics table is not kubeProxyMetrics; rewrite it with -update. Want:\n%s", path, want)
		}
		doc = doc[:start+len(tableBegin)] + want + doc[end:]
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, m := range kubeProxyMetrics {
		if seen[m.name] {
			t.Errorf("%s listed twice", m.name)
		}
		seen[m.name] = true
		if len(m.modes) == 0 && !strings.HasPrefix(m.note, "not exported") {
			t.Errorf("%s: exported nowhere, and the note does not say why: %q", m.name, m.note)
		}
	}
}
