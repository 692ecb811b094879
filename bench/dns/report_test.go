package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/svcproxy/svcproxy/bench/report"
)

// dnsRow is one server at one Service count as the JSON report holds it.
type dnsRow struct {
	Services     int     `json:"services"`
	Server       string  `json:"server"`
	ReadySeconds float64 `json:"ready_seconds"`
	MaxQPS       float64 `json:"max_qps"`
	P99FixedMs   float64 `json:"p99_ms_at_fixed_rate"`
	P50FixedMs   float64 `json:"p50_ms_at_fixed_rate"`
	RSSKiB       int64   `json:"rss_kib_after"`
	PeakKiB      int64   `json:"peak_rss_kib"`
}

// newDNSReport gathers the rows and the ratios printComparison and
// printBaseline print: each server against CoreDNS at the same Service count
// (max QPS: above 1× is faster; p99, RSS, ready after: below 1× is less),
// and the current clusterdns against the baseline build when there is one.
func newDNSReport(rows []cmpRow) report.Report {
	r := report.Report{Bench: "dns"}
	var out []dnsRow
	for _, x := range rows {
		out = append(out, dnsRow{Services: x.services, Server: x.name, ReadySeconds: x.ready.Seconds(), MaxQPS: x.qps,
			P99FixedMs: x.p99Fixed.Seconds() * 1e3, P50FixedMs: x.p50Fixed.Seconds() * 1e3, RSSKiB: x.rss, PeakKiB: x.peak})
	}
	r.Rows = out
	add := func(name string, a, b cmpRow) {
		g := report.Group{Name: name}
		g.Add("max QPS", a.qps, b.qps)
		g.Add(fmt.Sprintf("p99 at %d QPS", fixedRate), float64(a.p99Fixed), float64(b.p99Fixed))
		g.Add("RSS after", float64(a.rss), float64(b.rss))
		g.Add("ready after", float64(a.ready), float64(b.ready))
		if len(g.Values) > 0 {
			r.Ratios = append(r.Ratios, g)
		}
	}
	find := func(services int, name string) (cmpRow, bool) {
		for _, x := range rows {
			if x.services == services && name == x.name {
				return x, true
			}
		}
		return cmpRow{}, false
	}
	for _, x := range rows {
		if strings.HasPrefix(x.name, "CoreDNS") {
			continue
		}
		for _, core := range rows {
			if core.services == x.services && strings.HasPrefix(core.name, "CoreDNS") {
				add(fmt.Sprintf("%s / CoreDNS, %d Services", x.name, x.services), x, core)
				break
			}
		}
	}
	for _, x := range rows {
		source, ok := strings.CutPrefix(x.name, "clusterdns (")
		if !ok {
			continue
		}
		if base, ok := find(x.services, "clusterdns baseline ("+source); ok {
			add(fmt.Sprintf("clusterdns now / baseline (%s), %d Services", strings.TrimSuffix(source, ")"), x.services), x, base)
		}
	}
	return r
}

// writeDNSReport writes the report of rows to file (JSON= of run.sh) with
// the command a reader would type from the module's root.
func writeDNSReport(file, root, loadBefore, counts string, rows []cmpRow) error {
	r := newDNSReport(rows)
	rel, err := filepath.Rel(root, file)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = file
	}
	cmd := []string{"JSON=" + rel, "SERVICES=" + counts, "DURATION=" + os.Getenv("DURATION")}
	for _, env := range []string{"BASELINE", "APISERVER"} {
		if v := os.Getenv(env); v != "" {
			cmd = append(cmd, env+"="+v)
		}
	}
	r.Command = strings.Join(append(cmd, "bench/dns/run.sh"), " ")
	r.LoadBefore = loadBefore
	return report.Write(file, r)
}
