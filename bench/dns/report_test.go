package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/bench/report"
)

// dnsRow is one server at one Service count in one round, as the JSON
// report holds it.
type dnsRow struct {
	Services     int     `json:"services"`
	Round        int     `json:"round"`
	Server       string  `json:"server"`
	ReadySeconds float64 `json:"ready_seconds"`
	MaxQPS       float64 `json:"max_qps"`
	P99FixedMs   float64 `json:"p99_ms_at_fixed_rate"`
	P50FixedMs   float64 `json:"p50_ms_at_fixed_rate"`
	RSSKiB       int64   `json:"rss_kib_after"`
	PeakKiB      int64   `json:"peak_rss_kib"`
}

// dnsMetrics are the figures compared: max QPS (above 1×: more), the
// latencies at the fixed rate, RSS and ready after (below 1×: less).
var dnsMetrics = []struct {
	name  string
	value func(cmpRow) float64
}{
	{"max QPS", func(r cmpRow) float64 { return r.qps }},
	{fmt.Sprintf("p99 at %d QPS", fixedRate), func(r cmpRow) float64 { return float64(r.p99Fixed) }},
	{fmt.Sprintf("p50 at %d QPS", fixedRate), func(r cmpRow) float64 { return float64(r.p50Fixed) }},
	{"RSS after", func(r cmpRow) float64 { return float64(r.rss) }},
	{"ready after", func(r cmpRow) float64 { return float64(r.ready) }},
}

// dnsmasqRow names the floor's rows.
const dnsmasqRow = "dnsmasq (hosts file: the floor)"

// newDNSReport gathers the rows and the ratios: each server against CoreDNS
// at the same Service count, clusterdns (each source) against dnsmasq,
// whose p99 and QPS the targets are stated against, and the current
// clusterdns against the baseline build when there is one. A ratio is the
// mean of the rounds' ratios (the rows of a round met the same load), with
// its 95% interval.
func newDNSReport(rows []cmpRow) report.Report {
	r := report.Report{Bench: "dns"}
	var out []dnsRow
	for _, x := range rows {
		out = append(out, dnsRow{Services: x.services, Round: x.round, Server: x.name, ReadySeconds: x.ready.Seconds(), MaxQPS: x.qps,
			P99FixedMs: x.p99Fixed.Seconds() * 1e3, P50FixedMs: x.p50Fixed.Seconds() * 1e3, RSSKiB: x.rss, PeakKiB: x.peak})
	}
	r.Rows = out
	type pair struct {
		services int
		num, den string
	}
	var pairs []pair
	seen := map[pair]bool{}
	add := func(p pair) {
		if !seen[p] {
			seen[p] = true
			pairs = append(pairs, p)
		}
	}
	for _, x := range rows {
		if !strings.HasPrefix(x.name, "CoreDNS") {
			for _, c := range rows {
				if c.services == x.services && strings.HasPrefix(c.name, "CoreDNS") {
					add(pair{x.services, x.name, c.name})
					break
				}
			}
		}
	}
	for _, x := range rows {
		if strings.HasPrefix(x.name, "clusterdns (") && slices.ContainsFunc(rows, func(d cmpRow) bool { return d.services == x.services && d.name == dnsmasqRow }) {
			add(pair{x.services, x.name, dnsmasqRow})
		}
	}
	for _, x := range rows {
		if source, ok := strings.CutPrefix(x.name, "clusterdns ("); ok {
			base := "clusterdns baseline (" + source
			if slices.ContainsFunc(rows, func(b cmpRow) bool { return b.services == x.services && b.name == base }) {
				add(pair{x.services, x.name, base})
			}
		}
	}
	for _, p := range pairs {
		name := fmt.Sprintf("%s / %s, %d Services", p.num, shortName(p.den), p.services)
		if strings.HasPrefix(p.den, "clusterdns baseline (") {
			source := strings.TrimSuffix(strings.TrimPrefix(p.num, "clusterdns ("), ")")
			name = fmt.Sprintf("clusterdns now / baseline (%s), %d Services", source, p.services)
		}
		g := report.Group{Name: name}
		for _, m := range dnsMetrics {
			var num, den []float64
			for _, a := range rows {
				if a.services != p.services || a.name != p.num {
					continue
				}
				for _, b := range rows {
					if b.services == p.services && b.name == p.den && b.round == a.round {
						num, den = append(num, m.value(a)), append(den, m.value(b))
					}
				}
			}
			if mean, ci := report.MeanCI(report.PerRound(num, den)); mean > 0 {
				g.Values = append(g.Values, report.Ratio{Metric: m.name, Ratio: mean, CI95: ci})
			}
		}
		if len(g.Values) > 0 {
			r.Ratios = append(r.Ratios, g)
		}
	}
	return r
}

// shortName is a denominator's name in a group's: "CoreDNS", "dnsmasq".
func shortName(server string) string {
	switch {
	case strings.HasPrefix(server, "CoreDNS"):
		return "CoreDNS"
	case server == dnsmasqRow:
		return "dnsmasq"
	}
	return server
}

// writeDNSReport writes the report of rows to file (JSON= of run.sh) with
// the command a reader would type from the module's root.
func writeDNSReport(file, root, loadBefore, counts string, rounds int, rows []cmpRow) error {
	r := newDNSReport(rows)
	rel, err := filepath.Rel(root, file)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = file
	}
	cmd := []string{"JSON=" + rel, "SERVICES=" + counts, "DURATION=" + os.Getenv("DURATION"), fmt.Sprintf("ROUNDS=%d", rounds)}
	for _, env := range []string{"BASELINE", "APISERVER"} {
		if v := os.Getenv(env); v != "" {
			cmd = append(cmd, env+"="+v)
		}
	}
	r.Command = strings.Join(append(cmd, "bench/dns/run.sh"), " ")
	r.LoadBefore = loadBefore
	return report.Write(file, r)
}
