package kubeproxy

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/bench/report"
)

// pairing is one comparison of the report: num / den, round by round.
type pairing struct{ num, den proxy }

// pairings: svcproxy against kube-proxy in the modes both have; the socket
// LB and hybrid (whose kernel path is nftables) against both of
// kube-proxy's.
var pairings = []pairing{
	{proxy{svcproxy, "iptables"}, proxy{kubeProxy, "iptables"}},
	{proxy{svcproxy, "nftables"}, proxy{kubeProxy, "nftables"}},
	{proxy{svcproxy, "socklb"}, proxy{kubeProxy, "nftables"}},
	{proxy{svcproxy, "hybrid"}, proxy{kubeProxy, "nftables"}},
	{proxy{svcproxy, "socklb"}, proxy{kubeProxy, "iptables"}},
	{proxy{svcproxy, "hybrid"}, proxy{kubeProxy, "iptables"}},
}

// metric is one figure of a run, compared between the two of a pairing.
type metric struct {
	name  string
	value func(runResult) float64
}

// metrics are the report's, in its order. Times, CPU and memory: below 1×
// svcproxy spends less; rates: above 1× it makes more.
var metrics = []metric{
	{"cold start: last Service works (s)", func(r runResult) float64 { return r.ColdRuleSeconds }},
	{"cold start: /healthz 200 (s)", func(r runResult) float64 { return r.ColdHealthzSeconds }},
	{"programming latency p50 (s)", func(r runResult) float64 { return r.P50 }},
	{"programming latency p90 (s)", func(r runResult) float64 { return r.P90 }},
	{"programming latency p99 (s)", func(r runResult) float64 { return r.P99 }},
	{"p99 of changes during a full sync (s)", func(r runResult) float64 { return r.P99Full }},
	{"p99 of the other changes (s)", func(r runResult) float64 { return r.P99Rest }},
	{"own histogram p99 (s)", func(r runResult) float64 { return r.OwnP99 }},
	{"periodic full sync (s)", meanFullSync},
	{"CPU seconds, whole run", func(r runResult) float64 { return r.CPUSeconds }},
	{"CPU seconds, the proxy process alone", func(r runResult) float64 { return r.CPUOwnSeconds }},
	{"CPU seconds, cold start", func(r runResult) float64 { return r.CPUColdSeconds }},
	{"CPU seconds, the changes", func(r runResult) float64 { return r.CPUChangesSeconds }},
	{"peak RSS", func(r runResult) float64 { return float64(r.PeakRSSKiB) }},
	{"peak RSS with children", func(r runResult) float64 { return float64(r.PeakTreeRSSKiB) }},
	{"steady RSS", func(r runResult) float64 { return float64(r.SteadyRSSKiB) }},
	{"new connections/s, first Service / direct", func(r runResult) float64 { return overDirect(r.ConnPerSec, "first") }},
	{"new connections/s, last Service / direct", func(r runResult) float64 { return overDirect(r.ConnPerSec, "last") }},
	{"keep-alive requests/s, first Service / direct", func(r runResult) float64 { return overDirect(r.ReqPerSec, "first") }},
	{"keep-alive requests/s, last Service / direct", func(r runResult) float64 { return overDirect(r.ReqPerSec, "last") }},
}

// overDirect is target's rate over direct's in the same run (0 when either
// was not measured): a rate with the machine's load of the moment taken
// out, as a run of one proxy and a run of the other are minutes apart.
func overDirect(rates map[string]float64, target string) float64 {
	if rates[target] <= 0 || rates["direct"] <= 0 {
		return 0
	}
	return rates[target] / rates["direct"]
}

func meanFullSync(r runResult) float64 {
	if len(r.FullSyncs) == 0 {
		return 0
	}
	var s float64
	for _, f := range r.FullSyncs {
		s += f.Seconds
	}
	return s / float64(len(r.FullSyncs))
}

// reportRow is a run as the report keeps it: the run without its changes
// one by one (their percentiles stay), and a count of them.
type reportRow struct {
	runResult
	ChangesSeen int `json:"changes_seen"`
}

// newReport is a size's report: every run, and per pairing the mean of
// the per-round ratios of each metric with its 95% interval. A round where
// either side failed, or did not measure the metric, gives no ratio.
func newReport(sz size, results []runResult, st settings, bins programs) report.Report {
	r := report.Report{Bench: "kubeproxy-" + sz.String()}
	var rows []reportRow
	for _, x := range results {
		row := reportRow{runResult: x}
		for _, ch := range x.Changes {
			if ch.Err == "" {
				row.ChangesSeen++
			}
		}
		rows = append(rows, row)
	}
	r.Rows = rows
	legacy := slices.ContainsFunc(results, func(r runResult) bool { return r.IPTables == "legacy" })
	for _, pr := range pairings {
		g := report.Group{Name: fmt.Sprintf("%s / %s, %s", pr.num, pr.den, sz.label())}
		if legacy && (usesIPTables(pr.num) || usesIPTables(pr.den)) {
			g.Name += " (iptables-legacy)"
		}
		for _, m := range metrics {
			mean, ci := report.MeanCI(roundRatios(results, pr, m))
			if mean > 0 {
				g.Values = append(g.Values, report.Ratio{Metric: m.name, Ratio: mean, CI95: ci})
			}
		}
		if len(g.Values) > 0 {
			r.Ratios = append(r.Ratios, g)
		}
	}
	return r
}

// usesIPTables: the proxy's rules (iptables mode) or portals (hybrid) are
// iptables'.
func usesIPTables(p proxy) bool { return p.mode == "iptables" || p.mode == "hybrid" }

// roundRatios is m's num / den in each round where both ran without error.
func roundRatios(results []runResult, pr pairing, m metric) []float64 {
	var num, den []float64
	for _, a := range results {
		if a.Err != "" || a.Proxy != pr.num.program || a.Mode != pr.num.mode {
			continue
		}
		for _, b := range results {
			if b.Err == "" && b.Round == a.Round && b.Proxy == pr.den.program && b.Mode == pr.den.mode {
				num, den = append(num, m.value(a)), append(den, m.value(b))
			}
		}
	}
	return report.PerRound(num, den)
}

// median of m over p's runs without error; 0 if none.
func median(results []runResult, p proxy, m metric) float64 {
	var xs []float64
	for _, r := range results {
		if r.Err == "" && r.Proxy == p.program && r.Mode == p.mode {
			if v := m.value(r); v > 0 {
				xs = append(xs, v)
			}
		}
	}
	return percentile(xs, 50)
}

// printTables prints a size's figures (the median of each proxy's runs)
// and its ratios, as docs/benchmarks.md shows them.
func printTables(w io.Writer, sz size, r report.Report, results []runResult) {
	var ps []proxy
	for _, p := range allProxies {
		if slices.ContainsFunc(results, func(x runResult) bool { return x.Proxy == p.program && x.Mode == p.mode }) {
			ps = append(ps, p)
		}
	}
	backend := "nft"
	for _, x := range results {
		backend = x.IPTables
	}
	fmt.Fprintf(w, "\n%s, medians of the rounds, iptables backend %s (%s)\n\n| |", sz.label(), backend, r.Command)
	for _, p := range ps {
		fmt.Fprintf(w, " %s |", p)
	}
	fmt.Fprint(w, "\n|---|")
	for range ps {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, m := range metrics {
		fmt.Fprintf(w, "| %s |", m.name)
		for _, p := range ps {
			fmt.Fprintf(w, " %s |", format(m.name, median(results, p, m)))
		}
		fmt.Fprintln(w)
	}
	for _, x := range results {
		if x.Err != "" {
			fmt.Fprintf(w, "\nround %d, %s %s: %s\n", x.Round+1, x.Proxy, x.Mode, x.Err)
		}
	}
	fmt.Fprintln(w)
	for _, g := range r.Ratios {
		fmt.Fprintf(w, "| %s | ratio, mean ± 95%% |\n|---|---:|\n", g.Name)
		for _, v := range g.Values {
			fmt.Fprintf(w, "| %s | %.2f ± %.2f |\n", v.Metric, v.Ratio, v.CI95)
		}
		fmt.Fprintln(w)
	}
}

// format writes a figure in the unit its metric's name says.
func format(name string, v float64) string {
	switch {
	case v == 0:
		return "–"
	case strings.Contains(name, "RSS"):
		return fmt.Sprintf("%.1f MiB", v/1024)
	case strings.HasSuffix(name, "/ direct"):
		return fmt.Sprintf("%.3f", v)
	case strings.Contains(name, "/s"):
		return fmt.Sprintf("%.0f", v)
	case strings.HasSuffix(name, "(s)"):
		return time.Duration(v * float64(time.Second)).Round(time.Millisecond).String()
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
