package lab

import "testing"

func TestExpectIn(t *testing.T) {
	out := "web is 198.18.0.20\n[####] 30/30\n\nPOD    ANSWERS\nweb-0  10\nweb-1  10\n"
	tests := []struct {
		name   string
		expect []string
		ok     bool
	}{
		{"all, numbers differ", []string{"web is 198.18.0.21", "POD ANSWERS", "web-2 11", "web-1 12"}, true},
		{"gap", []string{"web is 198.18.0.20", "...", "web-1  10"}, true},
		{"order matters", []string{"web-1 10", "POD ANSWERS"}, false},
		{"missing", []string{"(failed) 1"}, false},
		{"nothing expected", nil, true},
		{"prefix", []string{"web is ...", "web-1 ..."}, true},
		{"prefix missing", []string{"db is ..."}, false},
		{"gap within a line", []string{"...is 198.18.0.20", "web-... 10"}, true},
		{"gap at the start", []string{"... ANSWERS"}, true},
		{"gap within, missing", []string{"...is db"}, false},
		{"two gaps, wrong order", []string{"...ANSWERS...POD..."}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := expectIn(tt.expect, out); ok != tt.ok {
				t.Errorf("expectIn = %v, want %v", ok, tt.ok)
			}
		})
	}
}
