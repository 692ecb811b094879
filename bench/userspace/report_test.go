package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/svcproxy/svcproxy/bench/report"
)

// TestNewReport: the report holds each path's figures as measured and the
// ratios printTCP prints, each over the metrics both rows have (no RSS
// ratio against direct, which has no proxy), and skips a comparison whose
// row is missing. The figures are made up: no benchmark runs here.
func TestNewReport(t *testing.T) {
	row := func(conns, reqs, gbits, kib float64) tcpRow {
		var r tcpRow
		r.conns.perSecond, r.reqs.perSecond, r.stream.gbits, r.kibPerIdle = conns, reqs, gbits, kib
		return r
	}
	paths := []path{{name: "direct"}, {name: "userspace"}, {name: "haproxy"}}
	rows := map[string]tcpRow{
		"direct":    row(1000, 4000, 10, 0),
		"userspace": row(400, 2000, 8, 7),
		"haproxy":   row(500, 2500, 4, 3.5),
	}
	got := newReport(paths, rows)
	wantRows := []reportRow{
		{Path: "direct", ConnectionsPerSecond: 1000, RequestsPerSecond: 4000, GbitPerSecond: 10},
		{Path: "userspace", ConnectionsPerSecond: 400, RequestsPerSecond: 2000, GbitPerSecond: 8, KiBPerIdle: 7},
		{Path: "haproxy", ConnectionsPerSecond: 500, RequestsPerSecond: 2500, GbitPerSecond: 4, KiBPerIdle: 3.5},
	}
	if !reflect.DeepEqual(got.Rows, any(wantRows)) {
		t.Errorf("rows %+v, want %+v", got.Rows, wantRows)
	}
	wantRatios := []report.Group{
		{Name: "userspace / haproxy", Values: []report.Ratio{{Metric: "connections/s", Ratio: 0.8}, {Metric: "requests/s (keep-alive)", Ratio: 0.8}, {Metric: "RSS per idle connection", Ratio: 2}}},
		{Name: "userspace / direct", Values: []report.Ratio{{Metric: "connections/s", Ratio: 0.4}, {Metric: "requests/s (keep-alive)", Ratio: 0.5}, {Metric: "Gbit/s (one stream)", Ratio: 0.8}}},
	}
	if !reflect.DeepEqual(got.Ratios, wantRatios) {
		t.Errorf("ratios %+v, want %+v (no haproxy-redirect row: its comparisons left out)", got.Ratios, wantRatios)
	}
}

// TestWriteReport: the file is the JSON bench/plot reads, with the date,
// the load and the command filled in.
func TestWriteReport(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r.json")
	r := report.Report{Bench: "userspace", Ratios: []report.Group{{Name: "a / b", Values: []report.Ratio{{Metric: "connections/s", Ratio: 0.5}}}}}
	if err := writeReport(file, r, "1.00 2.00 3.00"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"bench", "command", "date", "load_before", "load_after", "ratios"} {
		if got[key] == nil || got[key] == "" {
			t.Errorf("%s missing from %s", key, b)
		}
	}
	if got["load_before"] != "1.00 2.00 3.00" {
		t.Errorf("load_before %v", got["load_before"])
	}
}
