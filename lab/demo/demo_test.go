package demo

import (
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
)

func TestDemoOnly(t *testing.T) {
	l, err := lab.New(lab.Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{l: l, plan: l.Plan()}
	var titles []string
	for _, s := range only(d.steps(), "ipvs") {
		titles = append(titles, s.title)
	}
	if got, want := strings.Join(titles, "; "), "Build the lab; IPVS mode; Take it all down"; got != want {
		t.Errorf("demo steps --only ipvs = %q, want %q", got, want)
	}
}

// Every step's words are there: a title, why in a paragraph that ends its
// last line, and what it showed; on a control plane the first step is
// another, given more time.
func TestDemoTexts(t *testing.T) {
	l, err := lab.New(lab.Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range []*cluster.ControlPlane{nil, {}} {
		d := &demo{l: l, plan: l.Plan(), cp: cp}
		steps := d.steps()
		if len(steps) != 10 {
			t.Fatalf("%d steps, want 10", len(steps))
		}
		for _, s := range steps {
			if s.title == "" || strings.Contains(s.title, "\n") || !strings.HasSuffix(s.why, "\n") || strings.Contains(s.why, "\n\n") ||
				s.ok == "" || strings.Contains(s.ok, "\n") || s.run == nil {
				t.Errorf("step %q: title, why or ok malformed: %+v", s.title, s)
			}
		}
		if first := steps[0]; (cp != nil) != (first.title == "Build the lab, with a control plane") || (cp != nil) != (first.timeout > 0) {
			t.Errorf("control plane %v: first step %q, timeout %s", cp != nil, first.title, first.timeout)
		}
	}
}
