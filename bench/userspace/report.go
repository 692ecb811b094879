package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/bench/report"
)

// reportRow is one path's TCP figures.
type reportRow struct {
	Path                 string  `json:"path"`
	ConnectionsPerSecond float64 `json:"connections_per_second"`
	RequestsPerSecond    float64 `json:"requests_per_second"`
	GbitPerSecond        float64 `json:"gbit_per_second"`
	KiBPerIdle           float64 `json:"kib_per_idle_connection,omitempty"` // 0: not measured
}

// newReport gathers paths' rows and the comparisons printTCP prints, in the
// report bench/plot reads (bench/report). The figures are the run's own;
// nothing is rounded here.
func newReport(paths []path, rows map[string]tcpRow) report.Report {
	r := report.Report{Bench: "userspace"}
	var out []reportRow
	for _, p := range paths {
		t := rows[p.name]
		out = append(out, reportRow{Path: p.name, ConnectionsPerSecond: t.conns.perSecond,
			RequestsPerSecond: t.reqs.perSecond, GbitPerSecond: t.stream.gbits, KiBPerIdle: t.kibPerIdle})
	}
	r.Rows = out
	for _, c := range []struct {
		a, b string
		rss  bool // RSS per idle connection too (the direct row has none)
	}{
		{"userspace", "haproxy", true},
		{"userspace", "direct", false},
		{"haproxy-redirect", "haproxy", false},
		{"userspace", "haproxy-redirect", false},
	} {
		a, okA := rows[c.a]
		b, okB := rows[c.b]
		if !okA || !okB {
			continue
		}
		g := report.Group{Name: c.a + " / " + c.b}
		g.Add("connections/s", a.conns.perSecond, b.conns.perSecond)
		g.Add("requests/s (keep-alive)", a.reqs.perSecond, b.reqs.perSecond)
		if c.rss {
			g.Add("RSS per idle connection", a.kibPerIdle, b.kibPerIdle)
		} else {
			g.Add("Gbit/s (one stream)", a.stream.gbits, b.stream.gbits)
		}
		r.Ratios = append(r.Ratios, g)
	}
	return r
}

// commandLine is the command that ran, as a reader would type it: the flags
// that were set, in flag order (the re-executed process's own path is a
// temporary binary's).
func commandLine() string {
	parts := []string{"go run ./bench/userspace"}
	flag.Visit(func(f *flag.Flag) {
		parts = append(parts, fmt.Sprintf("-%s=%s", f.Name, f.Value))
	})
	return strings.Join(parts, " ")
}

// writeReport finishes r with the command and the load before the run and
// writes it to file (report.Write adds the run's end).
func writeReport(file string, r report.Report, loadBefore string) error {
	r.Command, r.LoadBefore = commandLine(), loadBefore
	if err := report.Write(file, r); err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	return nil
}
