package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"time"
)

// Report is one run of one benchmark.
type Report struct {
	Bench      string  `json:"bench"`
	Command    string  `json:"command"`
	Date       string  `json:"date"` // when the run ended, RFC 3339, UTC
	Go         string  `json:"go"`
	CPUs       int     `json:"cpus"`
	LoadBefore string  `json:"load_before"` // /proc/loadavg: 1, 5, 15 minutes
	LoadAfter  string  `json:"load_after"`
	Rows       any     `json:"rows,omitempty"` // the figures, in the benchmark's own shape
	Ratios     []Group `json:"ratios"`
}

// Group is one comparison, "a / b", over the metrics both sides have.
type Group struct {
	Name   string  `json:"name"`
	Values []Ratio `json:"values"`
}

// Ratio is a over b for one metric; CI95, when not 0, is the half-width of
// its 95% confidence interval.
type Ratio struct {
	Metric string  `json:"metric"`
	Ratio  float64 `json:"ratio"`
	CI95   float64 `json:"ci95,omitempty"`
}

// Add appends metric's ratio a / b when both figures were measured (> 0):
// a comparison lists only what both of its sides have.
func (g *Group) Add(metric string, a, b float64) {
	if a > 0 && b > 0 {
		g.Values = append(g.Values, Ratio{Metric: metric, Ratio: a / b})
	}
}

// LoadAvg is the load average, 1, 5 and 15 minutes, as /proc/loadavg has it;
// "unknown" where it cannot be read.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// Write finishes r with the run's end (the date, the Go version, the CPUs,
// and the load after unless set) and writes it, indented, to file.
func Write(file string, r Report) error {
	r.Date = time.Now().UTC().Format(time.RFC3339)
	r.Go, r.CPUs = runtime.Version(), runtime.NumCPU()
	if r.LoadAfter == "" {
		r.LoadAfter = LoadAvg()
	}
	if err := r.Check(); err != nil {
		return fmt.Errorf("report %s: %w", file, err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("report %s: %w", file, err)
	}
	if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("report %s: %w", file, err)
	}
	return nil
}

// Read reads and checks the report in file; its rows stay raw JSON.
func Read(file string) (Report, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Report{}, err
	}
	var r Report
	var rows json.RawMessage
	r.Rows = &rows
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("report %s: %w", file, err)
	}
	if err := r.Check(); err != nil {
		return Report{}, fmt.Errorf("report %s: %w", file, err)
	}
	return r, nil
}

// Check says what makes r unfit to plot: no ratios, a comparison without
// values, or a ratio (or interval) that is not a positive finite number,
// which a chart would draw as nothing and say nothing about.
func (r Report) Check() error {
	if len(r.Ratios) == 0 {
		return errors.New("ratios: none")
	}
	for _, g := range r.Ratios {
		if len(g.Values) == 0 {
			return fmt.Errorf("ratios %q: no values", g.Name)
		}
		for _, v := range g.Values {
			if !(v.Ratio > 0) || math.IsInf(v.Ratio, 0) {
				return fmt.Errorf("ratios %q: %s: ratio %v is not a positive number", g.Name, v.Metric, v.Ratio)
			}
			if !(v.CI95 >= 0) || math.IsInf(v.CI95, 0) {
				return fmt.Errorf("ratios %q: %s: ci95 %v is not a number >= 0", g.Name, v.Metric, v.CI95)
			}
		}
	}
	return nil
}
