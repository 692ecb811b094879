package lab

import (
	"strings"
	"testing"
)

func TestDemoOnly(t *testing.T) {
	l, err := New(Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var titles []string
	for _, s := range only(l.demoSteps(), "ipvs") {
		titles = append(titles, s.title)
	}
	if got, want := strings.Join(titles, "; "), "Build the lab; IPVS mode; Take it all down"; got != want {
		t.Errorf("demo steps --only ipvs = %q, want %q", got, want)
	}
}
