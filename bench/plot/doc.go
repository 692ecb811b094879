// Command plot draws the side-by-side ratios of benchmarks' JSON reports
// (bench/report) as an SVG: per report a section with the run's bench, date
// and load in its title and its command below, one group per comparison
// ("userspace / haproxy"), one bar per metric, a whisker over the 95%
// interval where the benchmark gives one, and a dashed line at 1×.
//
//	go run ./bench/userspace -json /tmp/userspace.json     # root; see docs/benchmarks.md
//	go run ./bench/plot -o /tmp/userspace.svg /tmp/userspace.json
//
// It draws what the report holds and computes nothing: the ratios are the
// benchmark's own, printed with two decimals as the benchmarks print them.
// Several reports give one section each, in the order given, each on its own
// scale (a sync against one command per rule is tens of times, a data path
// against a hand-written rule about 1×: one scale would flatten the second).
//
// The SVG is written with encoding/xml from a few structs (rect, line, text)
// rather than with a plotting library: a bar chart needs nothing more, and
// encoding/xml escapes the names and commands it prints.
package main
