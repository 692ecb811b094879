package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/tutorial"
)

// TestTutorialFiles needs no root: every tutorial parses (no output block
// without a command, no block left open) and is listed in the course's table
// of contents, tutorials/README.md. TestTutorials runs them.
func TestTutorialFiles(t *testing.T) {
	files, err := tutorial.Files(tutorials)
	if err != nil {
		t.Fatal(err)
	}
	toc, err := os.ReadFile(filepath.Join(tutorials, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		name := filepath.Base(file)
		tut, err := tutorial.ParseFile(file)
		if err != nil {
			t.Error(err)
			continue
		}
		t.Logf("%s: %d svclab commands, %d with output to check", name, len(tut.Commands), checked(tut))
		if !strings.Contains(string(toc), "("+name+")") {
			t.Errorf("tutorials/README.md does not link %s", name)
		}
	}
}

func checked(tut *tutorial.Tutorial) int {
	n := 0
	for _, c := range tut.Commands {
		if len(c.Expect) > 0 {
			n++
		}
	}
	return n
}
