// Package exampletest lets a test log what an Example prints.
//
// `go test -v` shows a test's log, never an Example's output: an Example
// that passes prints nothing but its name and PASS, so a walkthrough a
// tutorial names ("go test -run ExampleBalancer -v ./userspace") would
// show nothing. Each such Example has a twin, TestExampleNAME, that runs
// it with its standard output caught and logs each line; the Example's own
// // Output: comment still checks what it prints, and the twin's name
// contains the Example's, so the tutorial's -run pattern runs both.
package exampletest

import (
	"io"
	"os"
	"strings"
	"testing"
)

// Log runs example with the process's standard output caught, as go test
// runs an Example, and logs each line it printed. Not for parallel tests:
// it swaps os.Stdout while example runs.
func Log(t testing.TB, example func()) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	stdout := os.Stdout
	os.Stdout = w
	defer func() {
		t.Helper()
		os.Stdout = stdout
		w.Close()
		printed := <-out
		r.Close()
		for _, line := range strings.Split(strings.TrimRight(printed, "\n"), "\n") {
			t.Log(line)
		}
	}()
	example()
}
