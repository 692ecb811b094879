package kubeproxy

import (
	"errors"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/bench/tcpload"
)

// The quick checks of the benchmark's pure parts: go test runs them, the
// benchmark itself only runs with SVCPROXY_KUBEPROXY_BENCH=1.

func TestAddresses(t *testing.T) {
	sz := size{services: 40000, endpoints: 3}
	if got := clusterIP(0).String(); got != "198.18.0.16" {
		t.Errorf("clusterIP(0) = %s", got)
	}
	if got := clusterIP(40049); !serviceCIDR.Contains(got) {
		t.Errorf("clusterIP(40049) = %s, outside %s", got, serviceCIDR)
	}
	seen := map[netip.Addr]bool{}
	for i := range sz.services {
		ips := sz.endpointIPs(i)
		for _, ip := range ips {
			if !podCIDR.Contains(ip) || ip == podCIDR.Addr() {
				t.Fatalf("service %d: endpoint %s outside %s", i, ip, podCIDR)
			}
			seen[ip] = true
		}
		if ips[0] == ips[1] || ips[1] == ips[2] || ips[0] == ips[2] {
			t.Fatalf("service %d: endpoints %v not distinct", i, ips)
		}
		if added := sz.addedIP(i, 0); added == ips[0] || added == ips[1] || added == ips[2] {
			t.Fatalf("service %d: the added endpoint %s is one of %v", i, added, ips)
		}
	}
	if len(seen) != podRange {
		t.Errorf("%d pod addresses in use, want all %d", len(seen), podRange)
	}
	if podCIDR.Contains(clientPod.Addr()) || podCIDR.Contains(nodeBackSide.Addr()) {
		t.Error("the links' addresses are in the pod range the backend owns")
	}
}

// TestSlice: the slice is what the EndpointSlice controller writes.
func TestSlice(t *testing.T) {
	svc := newService(7)
	svc.UID = "uid-7"
	at := time.Date(2026, 12, 7, 10, 0, 0, 123456789, time.UTC)
	s := newSlice(svc, append(terminating(size{10, 2}.endpointIPs(7)), endpoint{ip: podIP(99)}), at)
	if s.Labels["kubernetes.io/service-name"] != "svc-00007" || s.Labels["endpointslice.kubernetes.io/managed-by"] != managedBy {
		t.Errorf("labels %v", s.Labels)
	}
	if got := s.Annotations["endpoints.kubernetes.io/last-change-trigger-time"]; got != "2026-12-07T10:00:00.123456789Z" {
		t.Errorf("trigger time %q", got)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "uid-7" || !*s.OwnerReferences[0].Controller {
		t.Errorf("owner %+v", s.OwnerReferences)
	}
	if len(s.Endpoints) != 3 || *s.Endpoints[0].Conditions.Ready || !*s.Endpoints[0].Conditions.Terminating ||
		!*s.Endpoints[2].Conditions.Ready || !*s.Endpoints[2].Conditions.Serving {
		t.Errorf("endpoints %+v", s.Endpoints)
	}
	if *s.Ports[0].Port != targetPort || svc.Spec.Ports[0].TargetPort.IntValue() != targetPort {
		t.Errorf("ports %+v / %+v", s.Ports, svc.Spec.Ports)
	}
}

// TestSchedule: pairs, each second half after its first and waiting for
// it, spread over the slots, the same for the same seed.
func TestSchedule(t *testing.T) {
	sz := size{1000, 10}
	sched := newSchedule(sz, 200, 300*time.Millisecond, 40)
	if len(sched) != 200 {
		t.Fatalf("%d changes, want 200", len(sched))
	}
	kinds := map[changeKind]int{}
	for i, ch := range sched {
		kinds[ch.kind]++
		if i > 0 && ch.at < sched[i-1].at {
			t.Errorf("change %d at %s before change %d at %s", i, ch.at, i-1, sched[i-1].at)
		}
		if ch.at >= 200*300*time.Millisecond {
			t.Errorf("change %d at %s, after the last slot", i, ch.at)
		}
		switch ch.kind {
		case endpointRemoved, serviceDeleted:
			f := sched[ch.first]
			if ch.first < 0 || ch.first >= i || f.svc != ch.svc || (f.kind != endpointAdded && f.kind != serviceCreated) {
				t.Errorf("change %d %+v waits for %d", i, ch, ch.first)
			}
		case serviceCreated:
			if ch.svc < sz.services || ch.first != -1 {
				t.Errorf("change %d creates service %d", i, ch.svc)
			}
		case endpointAdded:
			if ch.svc == 0 || ch.svc >= sz.services-1 {
				t.Errorf("change %d changes service %d: the data path's", i, ch.svc)
			}
		}
	}
	for _, k := range []changeKind{endpointAdded, endpointRemoved, serviceCreated, serviceDeleted} {
		if kinds[k] != 50 {
			t.Errorf("%d changes %q, want 50", kinds[k], k)
		}
	}
	again := newSchedule(sz, 200, 300*time.Millisecond, 40)
	for i := range sched {
		if sched[i] != again[i] {
			t.Fatalf("change %d: %+v, then %+v: not the same for the same seed", i, sched[i], again[i])
		}
	}
}

// TestKubeProxyConfig: health and metrics bind inside the node's
// namespace, conntrack's machine-wide sizing is left alone.
func TestKubeProxyConfig(t *testing.T) {
	b, err := kubeProxyConfig("nftables", "/k/kubeconfig", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	ct := cfg["conntrack"].(map[string]any)
	for key, want := range map[string]any{"kind": "KubeProxyConfiguration", "mode": "nftables",
		"healthzBindAddress": "0.0.0.0:10256", "metricsBindAddress": "127.0.0.1:10249", "hostnameOverride": nodeName} {
		if cfg[key] != want {
			t.Errorf("%s: %v, want %v", key, cfg[key], want)
		}
	}
	if ct["maxPerCore"] != float64(0) || ct["min"] != float64(0) || ct["tcpEstablishedTimeout"] != "0s" {
		t.Errorf("conntrack %v: want maxPerCore 0, min 0 and the timeouts 0s (left alone)", ct)
	}
	if cfg["nftables"].(map[string]any)["minSyncPeriod"] != "1s" {
		t.Errorf("nftables %v", cfg["nftables"])
	}
	if cfg["clientConnection"].(map[string]any)["kubeconfig"] != "/k/kubeconfig" {
		t.Errorf("clientConnection %v", cfg["clientConnection"])
	}
	args := strings.Join(svcproxyArgs("socklb", "/k", "/cg", time.Second, time.Minute), " ")
	for _, want := range []string{"--mode socklb", "--socklb-cgroup /cg", "--socklb-pin-path ", "--full-sync-period 1m0s",
		"--healthz-bind-address 0.0.0.0:10256", "--cluster-cidr 198.19.0.0/16"} {
		if !strings.Contains(args, want) {
			t.Errorf("svcproxy %s: no %q", args, want)
		}
	}
}

func TestProcParsing(t *testing.T) {
	stat := "1234 (kube proxy) S 1 1234 1234 0 -1 4194560 100 0 0 0 150 50 20 30 20 0 12 0 100 0 0"
	own, children, err := parseStatCPU(stat)
	if err != nil || math.Abs(own-2) > 1e-9 || math.Abs(children-0.5) > 1e-9 {
		t.Errorf("parseStatCPU = %v, %v, %v; want 2 s own (200 ticks), 0.5 s of children", own, children, err)
	}
	status := "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n"
	if statusKiB(status, "VmRSS:") != 1024 || statusKiB(status, "VmHWM:") != 2048 {
		t.Errorf("statusKiB of %q", status)
	}
}

func TestHistogram(t *testing.T) {
	h := histogram{Count: 10, Sum: 12, Bounds: []float64{0.5, 1, 2}, Buckets: []uint64{2, 6, 10}}
	for q, want := range map[float64]float64{0.5: 0.875, 0.2: 0.5, 0.9: 1.75, 1: 2} {
		if got := h.quantile(q); math.Abs(got-want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	d := h.sub(histogram{Count: 4, Sum: 2, Bounds: h.Bounds, Buckets: []uint64{2, 3, 4}})
	if d.Count != 6 || d.Buckets[0] != 0 || d.Buckets[2] != 6 {
		t.Errorf("sub = %+v", d)
	}
	if (histogram{}).quantile(0.5) != 0 {
		t.Error("the quantile of nothing is not 0")
	}
}

func TestLatencies(t *testing.T) {
	changes := []changeResult{{At: 1, Seconds: 0.5}, {At: 10, Seconds: 3}, {At: 20, Seconds: 0.2}, {At: 30, Err: "not seen"}}
	markFullSyncs(changes, []fullSync{{After: 11, Before: 12, Seconds: 2}}) // from 9-10 to 11-12
	if changes[0].FullSync || !changes[1].FullSync || changes[2].FullSync {
		t.Errorf("full sync marks %+v", changes)
	}
	p50, _, p99, full, rest := latencyPercentiles(changes)
	if p50 != 0.5 || p99 != 3 || full != 3 || rest != 0.5 {
		t.Errorf("p50 %v p99 %v full %v rest %v", p50, p99, full, rest)
	}
}

// TestReport: a ratio is the mean of the per-round ratios, and a failed run
// leaves its round out.
func TestReport(t *testing.T) {
	run := func(p proxy, round int, cold float64, err string) runResult {
		return runResult{Proxy: p.program, Mode: p.mode, Round: round, ColdRuleSeconds: cold, Err: err}
	}
	kp, sp := proxy{kubeProxy, "iptables"}, proxy{svcproxy, "iptables"}
	results := []runResult{run(kp, 0, 4, ""), run(sp, 0, 1, ""), run(kp, 1, 2, ""), run(sp, 1, 1, ""),
		run(kp, 2, 1, ""), run(sp, 2, 9, "exited")}
	r := newReport(size{1000, 10}, results, settings{}, programs{})
	if len(r.Ratios) != 1 || r.Ratios[0].Name != "svcproxy iptables / kube-proxy iptables, 1,000 × 10" {
		t.Fatalf("groups %+v", r.Ratios)
	}
	v := r.Ratios[0].Values[0]
	if v.Metric != metrics[0].name || math.Abs(v.Ratio-0.375) > 1e-9 || v.CI95 == 0 {
		t.Errorf("ratio %+v, want the mean of 1/4 and 1/2 with an interval", v)
	}
	if err := r.Check(); err != nil {
		t.Error(err)
	}
}

func TestParse(t *testing.T) {
	if s, err := parseSizes("1000x10, 40000x3"); err != nil || len(s) != 2 || s[1] != (size{40000, 3}) {
		t.Errorf("parseSizes = %v, %v", s, err)
	}
	for _, bad := range []string{"1000", "x3", "70000x3", "1x1"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q): no error", bad)
		}
	}
	if p, err := parseProxies("svcproxy hybrid,kube-proxy nftables"); err != nil || len(p) != 2 || p[0] != (proxy{svcproxy, "hybrid"}) {
		t.Errorf("parseProxies = %v, %v", p, err)
	}
	if _, err := parseProxies("kube-proxy socklb"); err == nil {
		t.Error("kube-proxy has no socket LB: want an error")
	}
	if got := (size{40000, 3}).label(); got != "40,000 × 3" {
		t.Errorf("label %q", got)
	}
}

// TestProbe runs the client's probes against tcpload's server on loopback.
func TestProbe(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go tcpload.Serve(ln)
	dst := ln.Addr().String()
	for _, req := range []request{{Kind: "up", Dst: dst}, {Kind: "reach", Dst: dst, EP: "127.0.0.1"}, {Kind: "leave", Dst: dst, EP: "127.0.0.2"}} {
		if r, err := probe(req); err != nil || r.Seen == 0 || r.Attempts < 1 {
			t.Errorf("probe %+v = %+v, %v", req, r, err)
		}
	}
	ln.Close()
	if r, err := probe(request{Kind: "down", Dst: dst}); err != nil || r.Attempts < 1 {
		t.Errorf("probe down = %+v, %v", r, err)
	}
	if holds(request{Kind: "down"}, "", errors.New("reset")) || !holds(request{Kind: "down"}, "", syscall.ECONNREFUSED) ||
		holds(request{Kind: "down"}, "198.19.0.1:8080", nil) {
		t.Error("down holds for a refusal or a timeout only")
	}
}

func TestLinkTree(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "copy")
	for _, f := range []string{"a/b/x.go", "a/y.go", "z.go"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := linkTree(src, dst, map[string][]byte{"a/y.go": []byte("patched")}); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"a/b/x.go": "a/b/x.go", "a/y.go": "patched", "z.go": "z.go"} {
		b, err := os.ReadFile(filepath.Join(dst, f))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", f, b, err, want)
		}
	}
	if fi, err := os.Lstat(filepath.Join(dst, "z.go")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("z.go is not a link: %v %v", fi, err)
	}
}

func TestIPTablesBackend(t *testing.T) {
	for _, tc := range []struct {
		setting string
		sz      size
		want    string
	}{
		{"auto", size{1000, 10}, "nft"},
		{"auto", size{10000, 3}, "legacy"},
		{"", size{5000, 50}, "legacy"},
		{"nft", size{40000, 3}, "nft"},
		{"legacy", size{1000, 10}, "legacy"},
	} {
		if got := iptablesBackend(tc.setting, tc.sz); got != tc.want {
			t.Errorf("iptablesBackend(%q, %s) = %s, want %s", tc.setting, tc.sz, got, tc.want)
		}
	}
}
