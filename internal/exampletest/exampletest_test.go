package exampletest

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what is logged.
type recorder struct {
	testing.TB
	lines []string
}

func (r *recorder) Helper()           {}
func (r *recorder) Log(args ...any)   { r.lines = append(r.lines, fmt.Sprint(args...)) }
func (r *recorder) Fatal(args ...any) { r.TB.Fatal(args...) }

func TestLog(t *testing.T) {
	r := &recorder{TB: t}
	Log(r, func() { fmt.Println("web, round-robin:"); fmt.Println("  connection 1 -> 198.19.1.10:8080") })
	if got := strings.Join(r.lines, "|"); got != "web, round-robin:|  connection 1 -> 198.19.1.10:8080" {
		t.Errorf("logged %q", got)
	}
	fmt.Println("standard output is the process's again")
}
