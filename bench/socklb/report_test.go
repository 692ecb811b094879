package socklb

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/bench/report"
	"github.com/svcproxy/svcproxy/bench/tcpload"
)

// rowFigures is one row of the report: its rates, the mean over the rounds
// and round by round, and its SYN retransmissions in all.
type rowFigures struct {
	Name           string    `json:"name"`
	ConnPerSec     float64   `json:"conn_per_s"`
	ReqPerSec      float64   `json:"req_per_s"`
	ConnPerRound   []float64 `json:"conn_per_s_rounds"`
	ReqPerRound    []float64 `json:"req_per_s_rounds"`
	SynRetransmits int64     `json:"syn_retrans"`
}

// newReport turns the rounds into the report's rows and ratios: each ratio
// is the mean of the per-round ratios (the rows of a round met the same
// load), with its 95% interval.
func newReport(res rounds) report.Report {
	r := report.Report{Bench: "socklb-datapath"}
	var rows []rowFigures
	for _, p := range paths {
		row := rowFigures{Name: p.name}
		for _, x := range res[p.name] {
			row.ConnPerRound = append(row.ConnPerRound, x.Conn.rate())
			row.ReqPerRound = append(row.ReqPerRound, x.KeepAlive.rate())
			row.SynRetransmits += x.Conn.SynRetrans + x.KeepAlive.SynRetrans
		}
		row.ConnPerSec, _ = report.MeanCI(row.ConnPerRound)
		row.ReqPerSec, _ = report.MeanCI(row.ReqPerRound)
		rows = append(rows, row)
	}
	r.Rows = rows
	for _, load := range []struct {
		group string
		rates func(rowFigures) []float64
	}{
		{fmt.Sprintf("new connections/s (connect, %d B request and answer, close; one at a time)", tcpload.MsgSize),
			func(f rowFigures) []float64 { return f.ConnPerRound }},
		{fmt.Sprintf("keep-alive requests/s (%d connections, %d B request and answer)", *workers, tcpload.MsgSize),
			func(f rowFigures) []float64 { return f.ReqPerRound }},
	} {
		g := report.Group{Name: load.group}
		for _, q := range []struct{ metric, num string }{
			{"socket LB / direct", "socklb"},
			{"nftables DNAT / direct", "nftables"},
			{"direct from the socket LB's cgroup / direct", "direct-hooked"},
		} {
			mean, ci := report.MeanCI(report.PerRound(load.rates(rowNamed(rows, q.num)), load.rates(rowNamed(rows, "direct"))))
			if mean > 0 {
				g.Values = append(g.Values, report.Ratio{Metric: q.metric, Ratio: mean, CI95: ci})
			}
		}
		if len(g.Values) > 0 {
			r.Ratios = append(r.Ratios, g)
		}
	}
	return r
}

func rowNamed(rows []rowFigures, name string) rowFigures {
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	return rowFigures{}
}

// TestNewReport: the ratios are the means of the per-round ratios (not the
// ratio of the means), over the rounds; a report of two rounds passes
// report.Check, so bench/plot can draw it.
func TestNewReport(t *testing.T) {
	res := rounds{
		"direct":        {{Conn: clientResult{Ops: 1000, Seconds: 1}, KeepAlive: clientResult{Ops: 4000, Seconds: 1}}, {Conn: clientResult{Ops: 500, Seconds: 1}, KeepAlive: clientResult{Ops: 4000, Seconds: 2}}},
		"socklb":        {{Conn: clientResult{Ops: 990, Seconds: 1}, KeepAlive: clientResult{Ops: 4000, Seconds: 1}}, {Conn: clientResult{Ops: 510, Seconds: 1}, KeepAlive: clientResult{Ops: 2000, Seconds: 1}}},
		"nftables":      {{Conn: clientResult{Ops: 800, Seconds: 1, SynRetrans: 1}, KeepAlive: clientResult{Ops: 3600, Seconds: 1}}, {Conn: clientResult{Ops: 400, Seconds: 1}, KeepAlive: clientResult{Ops: 1800, Seconds: 1}}},
		"direct-hooked": {{Conn: clientResult{Ops: 950, Seconds: 1}, KeepAlive: clientResult{Ops: 4000, Seconds: 1}}, {Conn: clientResult{Ops: 475, Seconds: 1}, KeepAlive: clientResult{Ops: 2000, Seconds: 1}}},
	}
	r := newReport(res)
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"0 socket LB / direct":                          (0.99 + 1.02) / 2, // the ratio of the means would be 1500/1500 = 1
		"0 nftables DNAT / direct":                      0.8,
		"1 socket LB / direct":                          1,
		"1 nftables DNAT / direct":                      0.9,
		"0 direct from the socket LB's cgroup / direct": 0.95,
		"1 direct from the socket LB's cgroup / direct": 1,
	}
	if len(r.Ratios) != 2 {
		t.Fatalf("%d groups, want 2 (new connections, keep-alive): %+v", len(r.Ratios), r.Ratios)
	}
	for i, g := range r.Ratios {
		for _, v := range g.Values {
			key := fmt.Sprintf("%d %s", i, v.Metric)
			if w, ok := want[key]; !ok || math.Abs(v.Ratio-w) > 1e-9 {
				t.Errorf("%s: %s = %v, want %v", g.Name, v.Metric, v.Ratio, w)
			}
			delete(want, key)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing ratios: %v", want)
	}
	rows := r.Rows.([]rowFigures)
	if rows[2].Name != "nftables" || rows[2].SynRetransmits != 1 || rows[0].ConnPerSec != 750 {
		t.Errorf("rows %+v: want nftables third with 1 SYN retransmission, direct at 750 conn/s", rows)
	}
}

// TestFromRoot: the report's command names the file from the module's root.
func TestFromRoot(t *testing.T) {
	if got := fromRoot("../../docs/benchmarks/socklb-datapath.json"); got != "docs/benchmarks/socklb-datapath.json" {
		t.Errorf("fromRoot = %q, want docs/benchmarks/socklb-datapath.json", got)
	}
	if got := fromRoot("/elsewhere/x.json"); got != "/elsewhere/x.json" {
		t.Errorf("fromRoot = %q, want the absolute path", got)
	}
}

// TestCheckFlags: a load flag that cannot make a round is refused by name.
func TestCheckFlags(t *testing.T) {
	if err := checkFlags(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	defer func(n int) { *conns = n }(*conns)
	*conns = 0
	if err := checkFlags(); err == nil || !strings.Contains(err.Error(), "-conns 0") {
		t.Errorf("checkFlags with -conns 0 = %v, want an error naming -conns 0", err)
	}
}
