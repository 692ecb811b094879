package iptables

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	gosync "sync"
	"testing"

	"github.com/svcproxy/svcproxy/bench/report"
)

// -report FILE writes the benchmarks' figures and side-by-side ratios as the
// JSON report bench/plot draws (bench/report). go test runs the benchmark in
// this package's directory, so FILE is best absolute; `make bench` passes
// $(CURDIR)/docs/benchmarks/NAME.json.
var reportFile = flag.String("report", "", "also write the figures and the side-by-side ratios as JSON to this `FILE` (for bench/plot; relative to bench/iptables)")

func TestMain(m *testing.M) {
	flag.Parse()
	before := report.LoadAvg()
	code := m.Run()
	if *reportFile != "" && code == 0 {
		r := newReport(figures.all(), comparisons)
		r.Command, r.LoadBefore = commandLine(), before
		if err := report.Write(*reportFile, r); err != nil {
			fmt.Fprintln(os.Stderr, "bench/iptables: -report:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// figures holds what the benchmarks kept, by name ("FullSync/nft/ports=1000"),
// one sample per figure go test prints (per -count).
var figures = &store{byName: map[string][]sample{}}

type store struct {
	mu     gosync.Mutex
	names  []string // in the order they ran
	byName map[string][]sample
}

type sample struct {
	n       int
	metrics map[string]float64
}

// keep reports metrics as b.ReportMetric does and keeps them for -report,
// with b's time per operation as "s/op"; call it last, with the timer
// stopped or not. The testing package runs a benchmark more than once for
// one figure (b.N = 1 first, then larger until -benchtime is reached) and the
// figure is the last run's; a run whose b.N is no larger than the one before
// begins the next figure (-count). A benchmark that -bench matches only in
// part (a pattern of more levels than its name) runs once, to look for
// sub-benchmarks, and go test prints no figure for it: neither does -report.
func keep(b *testing.B, metrics map[string]float64) {
	b.Helper()
	for unit, v := range metrics {
		b.ReportMetric(v, unit)
	}
	if f := flag.Lookup("test.bench"); f != nil && partial(f.Value.String(), b.Name()) {
		return
	}
	m := map[string]float64{"s/op": b.Elapsed().Seconds() / float64(b.N)}
	maps.Copy(m, metrics)
	figures.add(strings.TrimPrefix(b.Name(), "Benchmark"), b.N, m)
}

// partial says whether pattern (-bench) has more levels than name in every
// one of its alternatives, so that the testing package runs the benchmark
// name only to look for sub-benchmarks (testing's splitRegexp: '/' and '|'
// count outside brackets and parentheses). An alternative with fewer levels
// is taken as matching: the report may then keep a figure go test printed
// for another alternative, never lose one.
func partial(pattern, name string) bool {
	levels := strings.Count(name, "/") + 1
	alt, depth, brackets := 1, 0, 0
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case c == '\\':
			i++
		case c == '[':
			brackets++
		case c == ']' && brackets > 0:
			brackets--
		case c == '(' && brackets == 0:
			depth++
		case c == ')' && brackets == 0 && depth > 0:
			depth--
		case c == '/' && brackets == 0 && depth == 0:
			alt++
		case c == '|' && brackets == 0 && depth == 0:
			if alt <= levels {
				return false
			}
			alt = 1
		}
	}
	return alt > levels
}

func (s *store) add(name string, n int, metrics map[string]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs, ok := s.byName[name]
	if !ok {
		s.names = append(s.names, name)
	}
	if len(runs) > 0 && n > runs[len(runs)-1].n {
		runs[len(runs)-1] = sample{n, metrics} // the same figure, a longer run
	} else {
		runs = append(runs, sample{n, metrics})
	}
	s.byName[name] = runs
}

// row is one benchmark's figures: each metric's mean over its samples.
type row struct {
	Name    string             `json:"name"`
	Samples int                `json:"samples"`
	N       int                `json:"n"` // iterations per sample (the last sample's)
	Mean    map[string]float64 `json:"mean"`
}

func (s *store) all() []row {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []row
	for _, name := range s.names {
		runs := s.byName[name]
		r := row{Name: name, Samples: len(runs), N: runs[len(runs)-1].n, Mean: map[string]float64{}}
		for _, x := range runs {
			for unit, v := range x.metrics {
				r.Mean[unit] += v / float64(len(runs))
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// comparison is one ratio of a report: num's figure over den's, or, with no
// den, a ratio the benchmark computed itself (unit "ratio:X", with its 95%
// interval in "ci95:X").
type comparison struct {
	group, metric string
	num, den      string
	unit          string
}

// newReport computes the comparisons whose figures were measured, in order,
// grouped; a run of some benchmarks only (-bench) has only their groups.
func newReport(rows []row, cmps []comparison) report.Report {
	r := report.Report{Bench: "iptables", Rows: rows}
	fig := func(name, unit string) float64 {
		i := slices.IndexFunc(rows, func(r row) bool { return r.Name == name })
		if i < 0 {
			return 0
		}
		return rows[i].Mean[unit]
	}
	for _, c := range cmps {
		if len(r.Ratios) == 0 || r.Ratios[len(r.Ratios)-1].Name != c.group {
			r.Ratios = append(r.Ratios, report.Group{Name: c.group})
		}
		g := &r.Ratios[len(r.Ratios)-1]
		if c.den != "" {
			g.Add(c.metric, fig(c.num, c.unit), fig(c.den, c.unit))
			continue
		}
		if v := fig(c.num, c.unit); v > 0 {
			ci := fig(c.num, "ci95:"+strings.TrimPrefix(c.unit, "ratio:"))
			g.Values = append(g.Values, report.Ratio{Metric: c.metric, Ratio: v, CI95: ci})
		}
	}
	r.Ratios = slices.DeleteFunc(r.Ratios, func(g report.Group) bool { return len(g.Values) == 0 })
	return r
}

// commandLine is the go test command that ran, as a reader would type it
// from the module's root: the flags that choose, size and bound the benchmarks, and
// -report's file relative to the root.
func commandLine() string {
	parts := []string{"go test -run '^$'"}
	for _, name := range []string{"bench", "benchtime", "count", "timeout"} {
		f := flag.Lookup("test." + name)
		if f == nil || f.Value.String() == f.DefValue {
			continue
		}
		v := f.Value.String()
		if name == "bench" {
			v = "'" + v + "'"
		}
		parts = append(parts, "-"+name+" "+v)
	}
	parts = append(parts, "./bench/iptables/ -args -report", fromRoot(*reportFile))
	if os.Getenv("SVCP_BENCH_NFT_10K") == "1" {
		parts = append([]string{"SVCP_BENCH_NFT_10K=1"}, parts...)
	}
	return strings.Join(parts, " ")
}

// fromRoot is file relative to the module's root (go test runs in
// bench/iptables), or as given when it lies outside.
func fromRoot(file string) string {
	root, err := filepath.Abs("../..")
	if err != nil {
		return file
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return file
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || strings.HasPrefix(rel, "..") {
		return abs
	}
	return rel
}

// comparisons are the ratios -report writes, in the order bench/plot draws
// them. A time ratio below 1× means the first is faster; a rate ratio above
// 1× means the first is faster. Each `make bench` step runs some of the
// benchmarks, and its report has the groups whose figures it measured.
var comparisons = []comparison{
	{"sync time, iptables-nft / iptables-legacy, 1,000 ports", "full sync", "FullSync/nft/ports=1000", "FullSync/legacy/ports=1000", "s/op"},
	{"sync time, iptables-nft / iptables-legacy, 1,000 ports", "one-service change", "OneServiceChange/nft/ports=1000", "OneServiceChange/legacy/ports=1000", "s/op"},
	{"sync time, iptables-nft / iptables-legacy, 1,000 ports", "add or remove a Service", "AddService/nft/ports=1000", "AddService/legacy/ports=1000", "s/op"},
	{"sync time, nftables mode / iptables-nft, 1,000 ports", "full sync (restart)", "NFTFullSync/restart/ports=1000", "FullSync/nft/ports=1000", "s/op"},
	{"sync time, nftables mode / iptables-nft, 1,000 ports", "one-service change", "NFTOneServiceChange/ports=1000", "OneServiceChange/nft/ports=1000", "s/op"},
	{"sync time, nftables mode / iptables-legacy, 10,000 ports", "full sync (restart)", "NFTFullSync/restart/ports=10000", "FullSync/legacy/ports=10000", "s/op"},
	{"sync time, nftables mode / iptables-legacy, 10,000 ports", "one-service change", "NFTOneServiceChange/ports=10000", "OneServiceChange/legacy/ports=10000", "s/op"},
	{"svcproxy's own CPU / the whole one-service change, 1,000 ports", "iptables-nft", "SyncCPU/one-service-change/ports=1000", "OneServiceChange/nft/ports=1000", "s/op"},
	{"svcproxy's own CPU / the whole one-service change, 1,000 ports", "nftables mode", "NFTSyncCPU/one-service-change/ports=1000", "NFTOneServiceChange/ports=1000", "s/op"},
	{"time, one iptables command per rule / one iptables-restore", "100 ports", "Naive/ports=100", "Naive/one-restore/ports=100", "s/op"},
	{"time, one iptables command per rule / one iptables-restore", "1,000 ports", "Naive/ports=1000", "Naive/one-restore/ports=1000", "s/op"},
	{"iptables data path, svcproxy 1 Service / hand-written DNAT", "conn/s", "DataPath/conn/svcproxy-1-service", "DataPath/conn/dnat-by-hand", "conn/s"},
	{"iptables data path, svcproxy 1 Service / hand-written DNAT", "Gbit/s (one stream)", "DataPath/bulk/svcproxy-1-service", "DataPath/bulk/dnat-by-hand", "Gbit/s"},
	{"iptables data path, svcproxy 10,000 Services / 1 Service", "conn/s", "DataPath/conn/svcproxy-10000-services", "DataPath/conn/svcproxy-1-service", "conn/s"},
	{"iptables data path, svcproxy 10,000 Services / 1 Service", "Gbit/s (one stream)", "DataPath/bulk/svcproxy-10000-services", "DataPath/bulk/svcproxy-1-service", "Gbit/s"},
	{"conn/s interleaved, svcproxy 1 Service / hand-written rules", "iptables", "DataPathInterleaved", "", "ratio:ipt-1/hand"},
	{"conn/s interleaved, svcproxy 1 Service / hand-written rules", "nftables", "DataPathInterleaved", "", "ratio:nft-1/hand"},
	{"conn/s interleaved, svcproxy 10,000 Services / 1 Service", "iptables", "DataPathInterleaved", "", "ratio:ipt-10000/ipt-1"},
	{"conn/s interleaved, svcproxy 10,000 Services / 1 Service", "nftables", "DataPathInterleaved", "", "ratio:nft-10000/nft-1"},
}
