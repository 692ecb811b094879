package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestGroupAdd(t *testing.T) {
	g := Group{Name: "a / b"}
	g.Add("connections/s", 3, 4)
	g.Add("not measured by a", 0, 4)
	g.Add("not measured by b", 3, 0)
	want := []Ratio{{Metric: "connections/s", Ratio: 0.75}}
	if !reflect.DeepEqual(g.Values, want) {
		t.Errorf("values %+v, want %+v", g.Values, want)
	}
}

// TestWriteRead: Write fills in the run's end, Read gives back the ratios and
// the rows as they were written.
func TestWriteRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r.json")
	in := Report{Bench: "b", Command: "go run ./bench/b", LoadBefore: "1.00 2.00 3.00",
		Rows:   []map[string]float64{{"conn/s": 6000}},
		Ratios: []Group{{Name: "a / b", Values: []Ratio{{Metric: "m", Ratio: 1.05, CI95: 0.07}}}}}
	if err := Write(file, in); err != nil {
		t.Fatal(err)
	}
	out, err := Read(file)
	if err != nil {
		t.Fatal(err)
	}
	if out.Date == "" || out.Go == "" || out.CPUs == 0 || out.LoadAfter == "" {
		t.Errorf("the run's end not filled in: %+v", out)
	}
	if out.Bench != "b" || out.LoadBefore != "1.00 2.00 3.00" || !reflect.DeepEqual(out.Ratios, in.Ratios) {
		t.Errorf("read %+v, want %+v", out, in)
	}
	raw, ok := out.Rows.(*json.RawMessage)
	if !ok || strings.Join(strings.Fields(string(*raw)), "") != `[{"conn/s":6000}]` {
		t.Errorf("rows %v, want the raw JSON written", out.Rows)
	}
}

func TestCheck(t *testing.T) {
	one := func(v Ratio) Report { return Report{Ratios: []Group{{Name: "a / b", Values: []Ratio{v}}}} }
	for _, tc := range []struct {
		name string
		r    Report
		want string
	}{
		{"no ratios", Report{}, "ratios: none"},
		{"no values", Report{Ratios: []Group{{Name: "a / b"}}}, `ratios "a / b": no values`},
		{"zero", one(Ratio{Metric: "m"}), `ratios "a / b": m: ratio 0 is not a positive number`},
		{"negative", one(Ratio{Metric: "m", Ratio: -1}), "ratio -1 is not a positive number"},
		{"NaN", one(Ratio{Metric: "m", Ratio: math.NaN()}), "ratio NaN is not a positive number"},
		{"infinite", one(Ratio{Metric: "m", Ratio: math.Inf(1)}), "ratio +Inf is not a positive number"},
		{"negative interval", one(Ratio{Metric: "m", Ratio: 1, CI95: -0.1}), "ci95 -0.1 is not a number >= 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.r.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check() = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if err := one(Ratio{Metric: "m", Ratio: 0.5, CI95: 0.1}).Check(); err != nil {
		t.Errorf("a good report: %v", err)
	}
}

// TestWriteRefusesEmpty: a run that compared nothing writes no report.
func TestWriteRefusesEmpty(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r.json")
	if err := Write(file, Report{Bench: "b"}); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("Write of no ratios: %v, want an error naming %s", err, file)
	}
	if _, err := os.Stat(file); err == nil {
		t.Error("the file was written")
	}
}

// TestMeanCI: the mean and Student's t interval of a small sample, worked by
// hand: 0.9, 1.0, 1.1 have sd 0.1, so the half-width is 4.303 * 0.1 / sqrt(3).
func TestMeanCI(t *testing.T) {
	mean, half := MeanCI([]float64{0.9, 1.0, 1.1})
	if math.Abs(mean-1) > 1e-12 || math.Abs(half-4.303*0.1/math.Sqrt(3)) > 1e-12 {
		t.Errorf("MeanCI(0.9, 1.0, 1.1) = %v ± %v, want 1 ± %v", mean, half, 4.303*0.1/math.Sqrt(3))
	}
	if mean, half := MeanCI([]float64{2}); mean != 2 || half != 0 {
		t.Errorf("MeanCI(2) = %v ± %v, want 2 ± 0", mean, half)
	}
	if mean, half := MeanCI(nil); mean != 0 || half != 0 {
		t.Errorf("MeanCI() = %v ± %v, want 0 ± 0", mean, half)
	}
	if got := tQuantile975(100); got != 1.96 {
		t.Errorf("t(0.975, 100) = %v, want 1.96", got)
	}
}

func TestPerRound(t *testing.T) {
	got := PerRound([]float64{2, 3, 4, 5}, []float64{1, 0, 2})
	if want := []float64{2, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("PerRound = %v, want %v", got, want)
	}
}
