package house

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/svcproxy/svcproxy/"

// pkg is what `go list -json` says of a package that matters here.
type pkg struct {
	ImportPath string
	Imports    []string // of its non-test files
}

// testSupport reports whether p (relative to the module) is test support:
// only tests may import it.
func testSupport(p string) bool {
	return p == "test" || strings.HasPrefix(p, "test/") || strings.HasSuffix(filepath.Base(p), "test") ||
		p == "internal/testbin" || p == "internal/tutorial"
}

// product reports whether p is product code, which never imports test
// support: every package but test support and the benchmarks.
func product(p string) bool {
	return !testSupport(p) && p != "bench" && !strings.HasPrefix(p, "bench/")
}

// in reports whether p is room or a package under it.
func in(p, room string) bool { return p == room || strings.HasPrefix(p, room+"/") }

// path reports whether p is in a path's room: each serves Snapshots its own way.
func path(p string) bool { return in(p, "userspace") || in(p, "offload") }

// composition reports whether p puts paths together, above them.
func composition(p string) bool { return in(p, "hybrid") || in(p, "modes") }

// upward says why the import from -> to runs back up the house, or "" when
// it does not. Both are relative to the module.
func upward(from, to string) string {
	switch {
	case in(from, "dataplane") && (path(to) || composition(to)):
		return "the contract imports no path and no composition"
	case path(from) && composition(to):
		return "a path imports no composition"
	case in(from, "userspace") && in(to, "offload"),
		in(from, "offload") && in(to, "userspace"),
		otherPath(from, to):
		return "a path imports no other path (offload/kernelsync excepted)"
	case in(from, "hybrid") && in(to, "modes"):
		return "hybrid imports nothing that builds it"
	case in(from, "kernel") && (in(to, "dataplane") || path(to) || composition(to) || in(to, "service")):
		return "the kernel imports nothing of the proxy above it"
	case in(from, "service") && !in(to, "service"):
		return "the domain imports nothing above it"
	}
	return ""
}

// otherPath reports whether from and to are two kernel paths (offload/X and
// offload/Y), to not being their shared part, offload/kernelsync.
func otherPath(from, to string) bool {
	room := func(p string) string { return strings.SplitN(p+"/", "/", 3)[1] }
	return strings.HasPrefix(from, "offload/") && strings.HasPrefix(to, "offload/") &&
		!in(to, "offload/kernelsync") && room(from) != room(to)
}

// violations are the house's faults among pkgs: one line per import edge.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		from, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok || !product(from) {
			continue
		}
		for _, imp := range p.Imports {
			to, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if testSupport(to) {
				out = append(out, fmt.Sprintf("%s imports %s: product code imports no test support", from, to))
			}
			if why := upward(from, to); why != "" {
				out = append(out, fmt.Sprintf("%s imports %s: %s", from, to, why))
			}
		}
	}
	slices.Sort(out)
	return out
}

// list is `go list -json ./...` of the module this package is in.
func list(t *testing.T) []pkg {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: not the module", len(pkgs))
	}
	return pkgs
}

// TestHouse: no product package imports test support, and no import runs
// back up the house (doc.go says the rules). Each fault is printed as the
// import that breaks a rule.
func TestHouse(t *testing.T) {
	for _, v := range violations(list(t)) {
		t.Error(v)
	}
}

// The rules catch what they are for: each of these imports breaks one, and
// their mirror images (the imports that run down) break none.
func TestRules(t *testing.T) {
	broken := [][2]string{
		{"dataplane", "hybrid"}, {"dataplane", "offload/iptables"}, {"dataplane", "userspace"}, {"dataplane", "modes"},
		{"offload/iptables", "hybrid"}, {"offload/socklb", "userspace"}, {"offload/socklb", "offload/nftables"},
		{"offload/nftables", "hybrid/localhost"}, {"userspace", "hybrid"}, {"userspace", "offload/kernelsync"},
		{"hybrid", "modes"}, {"kernel/iptables", "dataplane"}, {"kernel/socklb/lifecycle", "offload/socklb"},
		{"kernel/nftables", "service"}, {"service", "dataplane"}, {"service/watch", "offload/nftables"},
		{"lab", "internal/kapitest"}, {"lab/cluster", "test/images"}, {"cmd/svcproxy", "service/servicetest"},
	}
	for _, e := range broken {
		pkgs := []pkg{{ImportPath: module + e[0], Imports: []string{module + e[1]}}}
		if v := violations(pkgs); len(v) == 0 {
			t.Errorf("%s -> %s: no rule broken, want one", e[0], e[1])
		}
	}
	fine := [][2]string{
		{"hybrid", "dataplane"}, {"hybrid", "userspace"}, {"hybrid/localhost", "offload/nftables"}, {"modes", "hybrid"},
		{"offload/iptables", "offload/kernelsync"}, {"offload/iptables", "dataplane"}, {"offload/socklb", "kernel/socklb"},
		{"userspace", "dataplane"}, {"kernel/socklb/lifecycle", "kernel/socklb"}, {"service/watch", "service"},
		{"cmd/svcproxy", "modes"}, {"bench/userspace", "internal/netnstest"}, {"test/lab", "lab"},
		{"internal/offloadtest", "internal/netnstest"},
	}
	for _, e := range fine {
		pkgs := []pkg{{ImportPath: module + e[0], Imports: []string{module + e[1]}}}
		if v := violations(pkgs); len(v) != 0 {
			t.Errorf("%s -> %s: %v, want no rule broken", e[0], e[1], v)
		}
	}
}
