package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
)

// report is the part of a benchmark's JSON report that the plot draws.
type report struct {
	Bench      string  `json:"bench"`
	Command    string  `json:"command"`
	Date       string  `json:"date"`
	LoadBefore string  `json:"load_before"`
	LoadAfter  string  `json:"load_after"`
	Ratios     []group `json:"ratios"`
}

// group is one comparison and its ratios, one per metric.
type group struct {
	Name   string  `json:"name"`
	Values []value `json:"values"`
}

type value struct {
	Metric string  `json:"metric"`
	Ratio  float64 `json:"ratio"`
}

func main() {
	out := flag.String("o", "", "write the SVG to this `FILE` (default: standard output)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: plot [-o FILE] REPORT.json...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(flag.Args(), *out); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func run(files []string, out string) error {
	if len(files) == 0 {
		return fmt.Errorf("no report given (the JSON of a benchmark's -json flag)")
	}
	var reports []report
	for _, f := range files {
		r, err := readReport(f)
		if err != nil {
			return err
		}
		reports = append(reports, r)
	}
	var w io.Writer = os.Stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	return writeSVG(w, reports)
}

// readReport reads and checks one report: a plot of a ratio that is not a
// positive number would draw nothing and say nothing.
func readReport(file string) (report, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return report{}, err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return report{}, fmt.Errorf("report %s: %w", file, err)
	}
	if len(r.Ratios) == 0 {
		return report{}, fmt.Errorf("report %s: ratios: none", file)
	}
	for _, g := range r.Ratios {
		if len(g.Values) == 0 {
			return report{}, fmt.Errorf("report %s: ratios %q: no values", file, g.Name)
		}
		for _, v := range g.Values {
			if !(v.Ratio > 0) || math.IsInf(v.Ratio, 0) {
				return report{}, fmt.Errorf("report %s: ratios %q: %s: ratio %v is not a positive number", file, g.Name, v.Metric, v.Ratio)
			}
		}
	}
	return r, nil
}
