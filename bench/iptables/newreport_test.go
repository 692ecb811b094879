package iptables

import (
	"reflect"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/bench/report"
)

// TestStoreSamples: the testing package's ramp (b.N = 1, then larger) gives
// one figure, the last run's; a run whose b.N does not grow begins the next
// figure (-count); rows keep the order the benchmarks ran in, and the mean is
// per metric over the figures.
func TestStoreSamples(t *testing.T) {
	s := &store{byName: map[string][]sample{}}
	s.add("B/x", 1, map[string]float64{"conn/s": 1})  // the ramp's first run
	s.add("B/x", 50, map[string]float64{"conn/s": 4}) // -count 1's figure
	s.add("A/y", 3, map[string]float64{"s/op": 2})
	s.add("B/x", 1, map[string]float64{"conn/s": 9})  // -count 2 begins
	s.add("B/x", 60, map[string]float64{"conn/s": 6}) // -count 2's figure
	s.add("A/y", 3, map[string]float64{"s/op": 4})    // -benchtime 3x: no ramp
	got := s.all()
	want := []row{
		{Name: "B/x", Samples: 2, N: 60, Mean: map[string]float64{"conn/s": 5}},
		{Name: "A/y", Samples: 2, N: 3, Mean: map[string]float64{"s/op": 3}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %+v, want %+v", got, want)
	}
}

// TestNewReport: a ratio is num's figure over den's, or the benchmark's own
// with its interval; a group whose figures were not measured (another make
// bench step ran them) is left out, and so is a ratio with one side missing.
func TestNewReport(t *testing.T) {
	rows := []row{
		{Name: "FullSync/nft/ports=1000", Mean: map[string]float64{"s/op": 1.5}},
		{Name: "FullSync/legacy/ports=1000", Mean: map[string]float64{"s/op": 0.5}},
		{Name: "OneServiceChange/nft/ports=1000", Mean: map[string]float64{"s/op": 0.04}},
		{Name: "DataPathInterleaved", Mean: map[string]float64{"ratio:ipt-1/hand": 1.04, "ci95:ipt-1/hand": 0.07}},
	}
	cmps := []comparison{
		{"time", "full sync", "FullSync/nft/ports=1000", "FullSync/legacy/ports=1000", "s/op"},
		{"time", "one-service change", "OneServiceChange/nft/ports=1000", "OneServiceChange/legacy/ports=1000", "s/op"},
		{"not run", "x", "Naive/ports=1000", "Naive/one-restore/ports=1000", "s/op"},
		{"interleaved", "iptables", "DataPathInterleaved", "", "ratio:ipt-1/hand"},
		{"interleaved", "nftables", "DataPathInterleaved", "", "ratio:nft-1/hand"},
	}
	got := newReport(rows, cmps)
	want := []report.Group{
		{Name: "time", Values: []report.Ratio{{Metric: "full sync", Ratio: 3}}},
		{Name: "interleaved", Values: []report.Ratio{{Metric: "iptables", Ratio: 1.04, CI95: 0.07}}},
	}
	if got.Bench != "iptables" || !reflect.DeepEqual(got.Ratios, want) {
		t.Errorf("report %s %+v, want iptables %+v", got.Bench, got.Ratios, want)
	}
	if err := got.Check(); err != nil {
		t.Error(err)
	}
}

// TestComparisonsNamed: every comparison names a benchmark of this package
// (a renamed sub-benchmark would drop its ratio from the report without a
// word) and says what it divides.
func TestComparisonsNamed(t *testing.T) {
	benchmarks := map[string]bool{}
	for _, name := range []string{"FullSync", "OneServiceChange", "AddService", "Naive", "SyncCPU",
		"NFTFullSync", "NFTOneServiceChange", "NFTSyncCPU", "DataPath", "DataPathInterleaved"} {
		benchmarks[name] = true
	}
	for _, c := range comparisons {
		for _, name := range []string{c.num, c.den} {
			if name == "" {
				continue
			}
			top, _, _ := strings.Cut(name, "/")
			if !benchmarks[top] {
				t.Errorf("%s, %s: %q is no benchmark of bench/iptables", c.group, c.metric, name)
			}
		}
		if c.group == "" || c.metric == "" || c.unit == "" || (c.den == "") != strings.HasPrefix(c.unit, "ratio:") {
			t.Errorf("comparison %+v: a group, a metric and a unit, and a den unless the unit is the benchmark's own ratio", c)
		}
	}
}

// TestCommandLine: the report's command is what a reader types from the
// module's root.
func TestCommandLine(t *testing.T) {
	if got := fromRoot("../../docs/benchmarks/iptables.json"); got != "docs/benchmarks/iptables.json" {
		t.Errorf("fromRoot = %q, want docs/benchmarks/iptables.json", got)
	}
	if got := fromRoot("/elsewhere/x.json"); got != "/elsewhere/x.json" {
		t.Errorf("fromRoot = %q, want the absolute path", got)
	}
	if got := commandLine(); !strings.HasPrefix(got, "go test -run '^$'") || !strings.Contains(got, "./bench/iptables/ -args -report") {
		t.Errorf("commandLine() = %q", got)
	}
}

// TestPartial: a benchmark is matched in part when -bench has more levels
// than its name, in every top-level alternative.
func TestPartial(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"Naive", "BenchmarkNaive/ports=100", false},
		{"FullSync|OneServiceChange", "BenchmarkOneServiceChange/nft/ports=1000", false},
		{"^Benchmark(A|B)$/(x|^(y|z)$)/^ports=1000$", "BenchmarkB/ports=1000", true},
		{"^Benchmark(A|B)$/(x|^(y|z)$)/^ports=1000$", "BenchmarkA/nft/ports=1000", false},
		{"a/b/c|d", "BenchmarkD/x", false},
		{"a/b/c|d/e/f", "BenchmarkD/x", true},
		{`a\/b/c`, "BenchmarkA/b", false},
		{"a[/]b/c", "BenchmarkA/b", false},
	} {
		if got := partial(tc.pattern, tc.name); got != tc.want {
			t.Errorf("partial(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}
