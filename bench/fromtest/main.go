package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/bench/report"
)

func main() {
	var ratios ratioFlags
	bench := flag.String("bench", "", "the report's bench name (required)")
	out := flag.String("o", "", "write the report to this `FILE` (required)")
	command := flag.String("command", "", "the go test command that ran, as a reader types it (required)")
	flag.Var(&ratios, "ratio", "a ratio to report, `group;metric;numerator;denominator;unit` (repeatable)")
	flag.Parse()
	if *bench == "" || *out == "" || *command == "" || len(ratios) == 0 {
		fmt.Fprintln(os.Stderr, "fromtest: -bench, -o, -command and at least one -ratio are required")
		os.Exit(2)
	}
	r := report.Report{Bench: *bench, Command: *command, LoadBefore: report.LoadAvg()}
	if err := run(os.Stdin, os.Stdout, &r, ratios); err != nil {
		fmt.Fprintln(os.Stderr, "fromtest:", err)
		os.Exit(1)
	}
	if err := report.Write(*out, r); err != nil {
		fmt.Fprintln(os.Stderr, "fromtest:", err)
		os.Exit(1)
	}
}

// ratio is one -ratio: num's figure in unit over den's.
type ratio struct{ group, metric, num, den, unit string }

type ratioFlags []ratio

func (f *ratioFlags) String() string { return fmt.Sprint(len(*f), " ratios") }

func (f *ratioFlags) Set(s string) error {
	p := strings.Split(s, ";")
	if len(p) != 5 || slices.ContainsFunc(p, func(s string) bool { return strings.TrimSpace(s) == "" }) {
		return fmt.Errorf("-ratio %q: want group;metric;numerator;denominator;unit, none empty", s)
	}
	*f = append(*f, ratio{p[0], p[1], p[2], p[3], p[4]})
	return nil
}

// row is one benchmark's figures: the mean per unit over its result lines.
type row struct {
	Name  string             `json:"name"`
	Lines int                `json:"lines"` // result lines (-count)
	Mean  map[string]float64 `json:"mean"`
}

// resultLine is a benchmark's result as go test prints it:
// "BenchmarkName/sub-2   500   1270000 ns/op   83064 B/op ...".
var resultLine = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+(\d+)\s+(.+)$`)

// run copies in to echo and fills r's rows and ratios from it.
func run(in io.Reader, echo io.Writer, r *report.Report, ratios []ratio) error {
	sums := map[string]map[string]float64{}
	lines := map[string]int{}
	var names []string
	failed := false
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if _, err := fmt.Fprintln(echo, line); err != nil {
			return err
		}
		if strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "--- FAIL") {
			failed = true
		}
		m := resultLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, fields := m[1], strings.Fields(m[4])
		if len(fields)%2 != 0 {
			continue // not a result: a log line that begins like one
		}
		if _, ok := sums[name]; !ok {
			sums[name] = map[string]float64{}
			names = append(names, name)
		}
		for i := 0; i < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return fmt.Errorf("benchmark %s: %q %s: %w", name, fields[i], fields[i+1], err)
			}
			sums[name][fields[i+1]] += v
		}
		lines[name]++
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if failed {
		return errors.New("go test printed FAIL: no report")
	}
	var rows []row
	mean := map[string]map[string]float64{}
	for _, name := range names {
		m := map[string]float64{}
		for unit, sum := range sums[name] {
			m[unit] = sum / float64(lines[name])
		}
		mean[name] = m
		rows = append(rows, row{Name: name, Lines: lines[name], Mean: m})
	}
	r.Rows = rows
	for _, q := range ratios {
		if len(r.Ratios) == 0 || r.Ratios[len(r.Ratios)-1].Name != q.group {
			r.Ratios = append(r.Ratios, report.Group{Name: q.group})
		}
		r.Ratios[len(r.Ratios)-1].Add(q.metric, mean[q.num][q.unit], mean[q.den][q.unit])
	}
	kept := r.Ratios[:0]
	for _, g := range r.Ratios {
		if len(g.Values) > 0 {
			kept = append(kept, g)
		}
	}
	r.Ratios = kept
	if len(r.Ratios) == 0 {
		return fmt.Errorf("no ratio asked for was measured (benchmarks seen: %s)", strings.Join(names, ", "))
	}
	return nil
}
