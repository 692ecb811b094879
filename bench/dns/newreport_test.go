package main

import (
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/bench/report"
)

// TestNewDNSReport: each server against CoreDNS at its own Service count,
// clusterdns against dnsmasq, the current build against the baseline, the
// figures as measured.
func TestNewDNSReport(t *testing.T) {
	const coredns = "CoreDNS v1.14.6 (kubeadm Corefile, API server)"
	rows := []cmpRow{
		{services: 2000, name: coredns, ready: 400 * time.Millisecond, qps: 30000, p99Fixed: 4 * time.Millisecond, p50Fixed: time.Millisecond, rss: 80000},
		{services: 2000, name: "clusterdns (manifests file)", ready: 100 * time.Millisecond, qps: 60000, p99Fixed: 2 * time.Millisecond, p50Fixed: time.Millisecond, rss: 24000},
		{services: 2000, name: "clusterdns baseline (manifests file)", ready: 200 * time.Millisecond, qps: 50000, p99Fixed: 2 * time.Millisecond, p50Fixed: time.Millisecond, rss: 30000},
		{services: 20000, name: coredns, ready: 2 * time.Second, qps: 30000, p99Fixed: 3 * time.Millisecond, p50Fixed: time.Millisecond, rss: 180000},
		{services: 20000, name: "clusterdns (API server)", ready: time.Second, qps: 60000, p99Fixed: time.Millisecond, p50Fixed: time.Millisecond, rss: 90000},
		{services: 20000, name: dnsmasqRow, ready: 50 * time.Millisecond, qps: 90000, p99Fixed: 500 * time.Microsecond, p50Fixed: 100 * time.Microsecond, rss: 7200},
	}
	r := newDNSReport(rows)
	want := []report.Group{
		{Name: "clusterdns (manifests file) / CoreDNS, 2000 Services", Values: []report.Ratio{
			{Metric: "max QPS", Ratio: 2}, {Metric: "p99 at 10000 QPS", Ratio: 0.5}, {Metric: "p50 at 10000 QPS", Ratio: 1},
			{Metric: "RSS after", Ratio: 0.3}, {Metric: "ready after", Ratio: 0.25}}},
		{Name: "clusterdns baseline (manifests file) / CoreDNS, 2000 Services", Values: []report.Ratio{
			{Metric: "max QPS", Ratio: 50000.0 / 30000}, {Metric: "p99 at 10000 QPS", Ratio: 0.5}, {Metric: "p50 at 10000 QPS", Ratio: 1},
			{Metric: "RSS after", Ratio: 0.375}, {Metric: "ready after", Ratio: 0.5}}},
		{Name: "clusterdns (API server) / CoreDNS, 20000 Services", Values: []report.Ratio{
			{Metric: "max QPS", Ratio: 2}, {Metric: "p99 at 10000 QPS", Ratio: 1.0 / 3}, {Metric: "p50 at 10000 QPS", Ratio: 1},
			{Metric: "RSS after", Ratio: 0.5}, {Metric: "ready after", Ratio: 0.5}}},
		{Name: "dnsmasq (hosts file: the floor) / CoreDNS, 20000 Services", Values: []report.Ratio{
			{Metric: "max QPS", Ratio: 3}, {Metric: "p99 at 10000 QPS", Ratio: 0.5 / 3}, {Metric: "p50 at 10000 QPS", Ratio: 0.1},
			{Metric: "RSS after", Ratio: 0.04}, {Metric: "ready after", Ratio: 0.025}}},
		{Name: "clusterdns (API server) / dnsmasq, 20000 Services", Values: []report.Ratio{
			{Metric: "max QPS", Ratio: 60000.0 / 90000}, {Metric: "p99 at 10000 QPS", Ratio: 2}, {Metric: "p50 at 10000 QPS", Ratio: 10},
			{Metric: "RSS after", Ratio: 12.5}, {Metric: "ready after", Ratio: 20}}},
		{Name: "clusterdns now / baseline (manifests file), 2000 Services", Values: []report.Ratio{
			{Metric: "max QPS", Ratio: 1.2}, {Metric: "p99 at 10000 QPS", Ratio: 1}, {Metric: "p50 at 10000 QPS", Ratio: 1},
			{Metric: "RSS after", Ratio: 0.8}, {Metric: "ready after", Ratio: 0.5}}},
	}
	if len(r.Ratios) != len(want) {
		t.Fatalf("%d groups %+v, want %d", len(r.Ratios), r.Ratios, len(want))
	}
	for i, g := range r.Ratios {
		if g.Name != want[i].Name || len(g.Values) != len(want[i].Values) {
			t.Errorf("group %d: %+v, want %+v", i, g, want[i])
			continue
		}
		for j, v := range g.Values {
			if w := want[i].Values[j]; v.Metric != w.Metric || v.Ratio < w.Ratio*0.999999 || v.Ratio > w.Ratio*1.000001 {
				t.Errorf("%s: %+v, want %+v", g.Name, v, w)
			}
		}
	}
	got := r.Rows.([]dnsRow)
	if w := (dnsRow{Services: 2000, Server: "clusterdns (manifests file)", ReadySeconds: 0.1, MaxQPS: 60000, P99FixedMs: 2, P50FixedMs: 1, RSSKiB: 24000}); !reflect.DeepEqual(got[1], w) {
		t.Errorf("row 1 %+v, want %+v", got[1], w)
	}
}

// TestDNSReportRounds: a ratio over rounds is the mean of the rounds'
// ratios, each server compared with the other of its own round.
func TestDNSReportRounds(t *testing.T) {
	var rows []cmpRow
	for round, q := range [][2]float64{{60000, 30000}, {30000, 30000}, {45000, 30000}} {
		rows = append(rows,
			cmpRow{services: 2000, round: round, name: "CoreDNS v1.14.6 (kubeadm Corefile, API server)", qps: q[1], rss: 1},
			cmpRow{services: 2000, round: round, name: "clusterdns (API server)", qps: q[0], rss: 1})
	}
	r := newDNSReport(rows)
	if len(r.Ratios) != 1 || r.Ratios[0].Values[0].Metric != "max QPS" {
		t.Fatalf("groups %+v", r.Ratios)
	}
	v := r.Ratios[0].Values[0]
	if math.Abs(v.Ratio-1.5) > 1e-9 || math.Abs(v.CI95-4.303*0.5/math.Sqrt(3)) > 1e-9 {
		t.Errorf("max QPS %+v, want 1.5 ± %.3f (the rounds' 2, 1, 1.5)", v, 4.303*0.5/math.Sqrt(3))
	}
}

// TestWriteDNSReport: the command is run.sh's, from the module's root.
func TestWriteDNSReport(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "docs", "dns.json")
	t.Setenv("DURATION", "3s")
	t.Setenv("BASELINE", "")
	t.Setenv("APISERVER", "")
	rows := []cmpRow{
		{services: 500, name: "CoreDNS v1.14.6 (kubeadm Corefile, API server)", qps: 100, rss: 10},
		{services: 500, name: "clusterdns (API server)", qps: 200, rss: 5},
	}
	if err := writeDNSReport(file, root, "1.00 1.00 1.00", "500", 1, rows); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("no docs directory: %v, want an error naming %s", err, file)
	}
	file = filepath.Join(root, "dns.json")
	if err := writeDNSReport(file, root, "1.00 1.00 1.00", "500", 1, rows); err != nil {
		t.Fatal(err)
	}
	r, err := report.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := "JSON=dns.json SERVICES=500 DURATION=3s ROUNDS=1 bench/dns/run.sh"; r.Command != want || r.LoadBefore != "1.00 1.00 1.00" {
		t.Errorf("command %q, load before %q; want %q", r.Command, r.LoadBefore, want)
	}
}
