// Command plot draws the side-by-side ratios of a benchmark's JSON report as
// an SVG: one group per comparison ("userspace / haproxy"), one bar per
// metric, a line at 1×, and the run's command, date and load in the title.
//
//	go run ./bench/userspace -json /tmp/userspace.json     # root; see docs/benchmarks.md
//	go run ./bench/plot -o /tmp/userspace.svg /tmp/userspace.json
//
// It draws what the report holds and computes nothing: the ratios are the
// benchmark's own, printed with two decimals as the benchmark prints them.
// Several reports give one section each, in the order given.
//
// The report, as bench/userspace's -json writes it:
//
//	{"bench": "userspace", "command": "go run ./bench/userspace -json=...",
//	 "date": "2026-12-03T09:00:00Z", "load_before": "1.2 1.5 2.0", "load_after": "...",
//	 "rows": [...],
//	 "ratios": [{"name": "userspace / haproxy",
//	             "values": [{"metric": "connections/s", "ratio": 0.79}, ...]}, ...]}
//
// The SVG is written with encoding/xml from a few structs (rect, line, text)
// rather than with a plotting library: a bar chart needs nothing more, and
// encoding/xml escapes the names and commands it prints.
package main
