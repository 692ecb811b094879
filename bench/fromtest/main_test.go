package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/bench/report"
)

// fixture is go test's output in its own format, with made-up figures: a
// test fixture, not a measurement.
const fixture = `goos: linux
goarch: amd64
pkg: example/fixture
BenchmarkChange/fake/services=10-2         	     500	   1000000 ns/op	   80000 B/op	      16 allocs/op
BenchmarkChange/fake/services=10-2         	     500	   3000000 ns/op	   80000 B/op	      16 allocs/op
    bench_test.go:72: BenchmarkChange/kernel: a log line that begins like a result, 3 x
BenchmarkChange/kernel/services=10-2       	     500	   4000000 ns/op	   80100 B/op	      24 allocs/op	  900 first-sync-ms
PASS
ok  	example/fixture	12.3s
`

func TestRun(t *testing.T) {
	var echo strings.Builder
	r := report.Report{Bench: "fixture"}
	ratios := []ratio{
		{"one change, time", "kernel / fake", "Change/kernel/services=10", "Change/fake/services=10", "ns/op"},
		{"one change, time", "not measured", "Change/kernel/services=10", "Change/none", "ns/op"},
		{"allocations", "kernel / fake", "Change/kernel/services=10", "Change/fake/services=10", "allocs/op"},
		{"not run", "x", "A", "B", "ns/op"},
	}
	if err := run(strings.NewReader(fixture), &echo, &r, ratios); err != nil {
		t.Fatal(err)
	}
	if echo.String() != fixture {
		t.Errorf("echo %q, want the input as it came", echo.String())
	}
	want := []report.Group{
		{Name: "one change, time", Values: []report.Ratio{{Metric: "kernel / fake", Ratio: 2}}},
		{Name: "allocations", Values: []report.Ratio{{Metric: "kernel / fake", Ratio: 1.5}}},
	}
	if !reflect.DeepEqual(r.Ratios, want) {
		t.Errorf("ratios %+v, want %+v", r.Ratios, want)
	}
	rows := r.Rows.([]row)
	wantRows := []row{
		{Name: "Change/fake/services=10", Lines: 2, Mean: map[string]float64{"ns/op": 2e6, "B/op": 80000, "allocs/op": 16}},
		{Name: "Change/kernel/services=10", Lines: 1, Mean: map[string]float64{"ns/op": 4e6, "B/op": 80100, "allocs/op": 24, "first-sync-ms": 900}},
	}
	if !reflect.DeepEqual(rows, wantRows) {
		t.Errorf("rows %+v, want %+v", rows, wantRows)
	}
}

func TestRunErrors(t *testing.T) {
	one := []ratio{{"g", "m", "Change/kernel/services=10", "Change/fake/services=10", "ns/op"}}
	for _, tc := range []struct {
		name, in string
		ratios   []ratio
		want     string
	}{
		{"failed", fixture + "--- FAIL: BenchmarkChange/kernel\nFAIL\n", one, "go test printed FAIL"},
		{"nothing measured", "PASS\n", one, "no ratio asked for was measured"},
		{"not a number", "BenchmarkX-2  1  abc ns/op\n", one, `benchmark X: "abc" ns/op`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var echo strings.Builder
			r := report.Report{}
			if err := run(strings.NewReader(tc.in), &echo, &r, tc.ratios); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestRatioFlag(t *testing.T) {
	var f ratioFlags
	if err := f.Set("g;m;A/x;B/x;ns/op"); err != nil || !reflect.DeepEqual(f, ratioFlags{{"g", "m", "A/x", "B/x", "ns/op"}}) {
		t.Errorf("Set: %v, %+v", err, f)
	}
	for _, bad := range []string{"g;m;A;B", "g;m;A;B;ns/op;x", "g; ;A;B;ns/op"} {
		if err := f.Set(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Set(%q) = %v, want an error naming it", bad, err)
		}
	}
}
