// Package report is the JSON report that svcproxy's benchmarks write
// (bench/userspace -json FILE, bench/iptables -args -report FILE,
// JSON=FILE bench/dns/run.sh; bench/fromtest for go test output of any other
// benchmark) and that bench/plot draws: the run's command, date, Go
// version, CPUs and load average before and after, the figures as measured
// (rows, each benchmark's own shape), and the side-by-side ratios it
// compares, grouped by comparison ("userspace / haproxy") with one value per
// metric.
//
// A ratio is the benchmark's own: two figures of one run divided, or a mean of
// per-round ratios with its 95% interval (bench/iptables's interleaved data
// path). docs/benchmarks.md says why the benchmarks compare within one run.
package report
