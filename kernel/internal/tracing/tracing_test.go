package tracing

import (
	"slices"
	"testing"
)

// spread is kube-proxy's layout of n endpoints: rules taken with 1/n, 1/(n-1),
// ..., 1. It returns the endpoint a trace ends at.
func spread(n int) func(Choose) (int, error) {
	return func(choose Choose) (int, error) {
		for i := range n {
			if choose(1 / float64(n-i)) {
				return i, nil
			}
		}
		return -1, nil
	}
}

func TestAll(t *testing.T) {
	got, err := All(spread(4))
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("All = %v, want each endpoint once: %v", got, want)
	}
}

func TestPick(t *testing.T) {
	for i := range 3 {
		if got, _ := spread(3)(Pick(i)); got != i {
			t.Errorf("Pick(%d) ends at %d", i, got)
		}
	}
	if got, _ := spread(3)(Pick(7)); got != 2 {
		t.Errorf("Pick past the last choice: %d, want the unconditional rule (2)", got)
	}
}
