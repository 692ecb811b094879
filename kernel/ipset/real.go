package ipset

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Real runs the ipset binary (`ipset restore`, `ipset save`) in the network namespace
// of the calling thread.
type Real struct {
	path string
}

var _ Interface = (*Real)(nil)

// New finds the ipset binary.
func New() (*Real, error) {
	p, err := exec.LookPath("ipset")
	if err != nil {
		return nil, fmt.Errorf("ipset: not found (install the ipset package): %w", err)
	}
	return &Real{path: p}, nil
}

// Restore implements Interface.
func (r *Real) Restore(ctx context.Context, script []byte) error {
	cmd := exec.CommandContext(ctx, r.path, "restore")
	cmd.Stdin = bytes.NewReader(script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ipset restore: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// List implements Interface.
func (r *Real) List(ctx context.Context) ([]Set, error) {
	cmd := exec.CommandContext(ctx, r.path, "save")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ipset save: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseSave(out)
}

// parseSave reads `ipset save` output:
//
//	create NAME hash:ip,port family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x...
//	add NAME 198.18.0.10,tcp:80
func parseSave(b []byte) ([]Set, error) {
	var out []Set
	idx := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		switch {
		case len(w) >= 3 && w[0] == "create":
			s := Set{Name: w[1], Type: w[2], Family: Inet}
			for i := 3; i+1 < len(w); i++ {
				if w[i] == "family" {
					s.Family = w[i+1]
				}
			}
			idx[s.Name] = len(out)
			out = append(out, s)
		case len(w) >= 3 && w[0] == "add":
			i, ok := idx[w[1]]
			if !ok {
				return nil, fmt.Errorf("ipset save: member of undeclared set %s", w[1])
			}
			out[i].Members = append(out[i].Members, w[2])
		}
	}
	return out, sc.Err()
}
