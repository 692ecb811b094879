package pods

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/lab/topology"
)

func tally(events ...Event) *Tally {
	t := &Tally{Target: "web"}
	for _, e := range events {
		t.Add(e)
	}
	return t
}

func TestTally(t *testing.T) {
	tl := tally(
		Event{Addr: "198.18.0.20:80"},
		Event{Seq: 1, Pod: "web-1", From: "198.19.0.1:40001"},
		Event{Seq: 2, Pod: "web-0", From: "198.19.0.1:40002"},
		Event{Seq: 3, Pod: "web-1", From: "198.19.1.2:40003"},
		Event{Seq: 4, Err: "connection refused"},
		Event{Seq: 5, Err: "connection refused"},
		Event{Seq: 6, Pod: "web-1", From: "198.19.0.1:40004"},
	)
	require.Equal(t, "198.18.0.20:80", tl.Addr)
	require.Equal(t, 6, tl.Total)
	require.Equal(t, 2, tl.Failed)
	require.Equal(t, 4, tl.Answered())
	require.Equal(t, []string{"connection refused"}, tl.Errors)
	node, client := netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.1.2")
	require.Equal(t, []PodCount{
		{Pod: "web-0", Answers: 1, Sources: []netip.Addr{node}},
		{Pod: "web-1", Answers: 3, Sources: []netip.Addr{node, client}},
	}, tl.Pods)
	require.Equal(t, []netip.Addr{node, client}, tl.Sources())
}

func TestWriteTableAndChart(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
		table  string
		chart  string
	}{
		{
			name: "round robin",
			events: []Event{
				{Seq: 1, Pod: "web-0", From: "198.19.0.1:1"},
				{Seq: 2, Pod: "web-1", From: "198.19.0.1:2"},
				{Seq: 3, Pod: "web-2", From: "198.19.0.1:3"},
				{Seq: 4, Pod: "web-0", From: "198.19.0.1:4"},
			},
			table: `POD    ANSWERS  SHARE  CLIENT ADDRESS THE POD SAW
web-0  2        50%    198.19.0.1 (node)
web-1  1        25%    198.19.0.1 (node)
web-2  1        25%    198.19.0.1 (node)
`,
			chart: `web-0 ██████████ 2
web-1 █████ 1
web-2 █████ 1
`,
		},
		{
			name: "failures",
			events: []Event{
				{Seq: 1, Pod: "web-0", From: "10.0.0.9:1"},
				{Seq: 2, Err: "i/o timeout"},
				{Seq: 3, Err: "refused"},
			},
			table: `POD       ANSWERS  SHARE  CLIENT ADDRESS THE POD SAW
web-0     1        33%    10.0.0.9
(failed)  2        67%    i/o timeout; refused
`,
			chart: `web-0    █████ 1
(failed) ██████████ 2
`,
		},
		{
			name:  "nothing",
			table: "POD  ANSWERS  SHARE  CLIENT ADDRESS THE POD SAW\n",
		},
	}
	names := topology.DefaultPlan().Names()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := tally(tt.events...)
			var table, chart strings.Builder
			require.NoError(t, tl.WriteTable(&table, names))
			require.NoError(t, tl.WriteChart(&chart, 10))
			require.Equal(t, tt.table, table.String())
			require.Equal(t, tt.chart, chart.String())
		})
	}
}

func TestBar(t *testing.T) {
	tests := []struct{ n, most, width, want int }{
		{0, 10, 40, 0},
		{10, 10, 40, 40},
		{1, 1000, 40, 1}, // never invisible
		{5, 10, 40, 20},
		{0, 0, 40, 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, strings.Count(bar(tt.n, tt.most, tt.width), "█"), "bar(%d, %d, %d)", tt.n, tt.most, tt.width)
	}
}

func TestProgress(t *testing.T) {
	require.Equal(t, "[..........]  0/30", Progress(0, 30, 10))
	require.Equal(t, "[#####.....] 15/30", Progress(15, 30, 10))
	require.Equal(t, "[##########] 30/30", Progress(30, 30, 10))
	require.Equal(t, "", Progress(0, 0, 10))
}
