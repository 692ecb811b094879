package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// report is what -json writes: the TCP table's rows and the ratios printTCP
// prints, with the run's date and load, in the form bench/plot reads (its doc
// comment describes the format). The figures are the run's own; nothing is
// rounded here.
type report struct {
	Bench      string       `json:"bench"`
	Command    string       `json:"command"`
	Date       string       `json:"date"` // when the run ended, RFC 3339, UTC
	Go         string       `json:"go"`
	CPUs       int          `json:"cpus"`
	LoadBefore string       `json:"load_before"` // /proc/loadavg: 1, 5, 15 minutes
	LoadAfter  string       `json:"load_after"`
	Rows       []reportRow  `json:"rows"`
	Ratios     []ratioGroup `json:"ratios"`
}

// reportRow is one path's TCP figures.
type reportRow struct {
	Path                 string  `json:"path"`
	ConnectionsPerSecond float64 `json:"connections_per_second"`
	RequestsPerSecond    float64 `json:"requests_per_second"`
	GbitPerSecond        float64 `json:"gbit_per_second"`
	KiBPerIdle           float64 `json:"kib_per_idle_connection,omitempty"` // 0: not measured
}

// ratioGroup is one comparison, "a / b", over the metrics both rows have.
type ratioGroup struct {
	Name   string  `json:"name"`
	Values []ratio `json:"values"`
}

type ratio struct {
	Metric string  `json:"metric"`
	Ratio  float64 `json:"ratio"`
}

// newReport gathers paths' rows and the comparisons printTCP prints.
func newReport(paths []path, rows map[string]tcpRow) report {
	r := report{Bench: "userspace", Go: runtime.Version(), CPUs: runtime.NumCPU()}
	for _, p := range paths {
		t := rows[p.name]
		r.Rows = append(r.Rows, reportRow{Path: p.name, ConnectionsPerSecond: t.conns.perSecond,
			RequestsPerSecond: t.reqs.perSecond, GbitPerSecond: t.stream.gbits, KiBPerIdle: t.kibPerIdle})
	}
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
		g := ratioGroup{Name: c.a + " / " + c.b}
		add := func(metric string, x, y float64) {
			if x > 0 && y > 0 {
				g.Values = append(g.Values, ratio{Metric: metric, Ratio: x / y})
			}
		}
		add("connections/s", a.conns.perSecond, b.conns.perSecond)
		add("requests/s (keep-alive)", a.reqs.perSecond, b.reqs.perSecond)
		if c.rss {
			add("RSS per idle connection", a.kibPerIdle, b.kibPerIdle)
		} else {
			add("Gbit/s (one stream)", a.stream.gbits, b.stream.gbits)
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

// writeReport finishes r with the run's end and writes it to file.
func writeReport(file string, r report, loadBefore string) error {
	r.Command = commandLine()
	r.Date = time.Now().UTC().Format(time.RFC3339)
	r.LoadBefore, r.LoadAfter = loadBefore, loadavg()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("-json %s: %w", file, err)
	}
	return nil
}
