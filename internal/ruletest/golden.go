package ruletest

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// CheckGolden compares got with testdata/<name>.golden, or rewrites the file
// with go test -update. what says what got is, as a reader meets it: "as
// iptables-restore reads it".
func CheckGolden(t *testing.T, name, what string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	t.Logf("%s, %s:\n%s", path, what, got)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s: differs from the golden file (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}
