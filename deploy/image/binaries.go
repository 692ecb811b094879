package image

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// BuildBinaries builds ./cmd/NAME for each name into dir, static
// (CGO_ENABLED=0) and without symbol tables (-s -w: panics still name their
// functions), in the root of the module the working directory is in, and
// returns name -> path. A name with a slash is a package directory under the
// module's root ("images/pause"), and its last element the name.
func BuildBinaries(dir string, names ...string) (map[string]string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	root := strings.TrimSuffix(strings.TrimSpace(string(gomod)), "go.mod")
	if err != nil || root == "" || root == os.DevNull {
		return nil, fmt.Errorf("go env GOMOD: %v (%q): not inside the module", err, gomod)
	}
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", dir + string(os.PathSeparator)}
	for _, n := range names {
		if strings.Contains(n, "/") {
			args = append(args, "./"+n)
		} else {
			args = append(args, "./cmd/"+n)
		}
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	bins := map[string]string{}
	for _, n := range names {
		bins[path.Base(n)] = filepath.Join(dir, path.Base(n))
	}
	return bins, nil
}
