package socklb

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/bench/report"
)

// The load of each row and round (after -args; make bench keeps the
// defaults). -benchtime Nx sets the rounds.
var (
	conns     = flag.Int("conns", 1000, "new connections per row and round, one at a time")
	workers   = flag.Int("workers", 2, "keep-alive connections, one worker each")
	keepFor   = flag.Duration("keepalive", 500*time.Millisecond, "how long each row's keep-alive load runs per round")
	reportOut = flag.String("report", "", "also write the figures and ratios as JSON to this `FILE` (for bench/plot; best absolute: go test runs in bench/socklb)")
)

// path is one way from the client pod to the server pod.
type path struct {
	name    string
	cgroup  func(*lab) *cgroup // where the client is born
	dst     string
	install func(*lab, *testing.B) // before the row's load, each round; nil: none
	remove  func(*lab, *testing.B)
}

// paths are the rows: the order of the first round, rotated in the next.
var paths = []path{
	{name: "direct", cgroup: func(l *lab) *cgroup { return l.plain },
		dst: netip.AddrPortFrom(serverPod.Addr(), directPort).String()},
	// Untranslated, a connect to the VIP would fail: the node has no route
	// to 198.18.0.0/16 (network unreachable), so every figure of this row
	// is of translated connections.
	{name: "socklb", cgroup: func(l *lab) *cgroup { return l.lb },
		dst: net.JoinHostPort(vip.String(), "80")},
	{name: "nftables", cgroup: func(l *lab) *cgroup { return l.plain },
		dst: net.JoinHostPort(vip.String(), "81"), install: (*lab).installNFT, remove: (*lab).removeNFT},
}

// rounds holds each row's results, round by round.
type rounds map[string][]roundResult

type roundResult struct {
	Conn, KeepAlive clientResult
}

// BenchmarkDataPath: new connections/s (connect, one 64-byte request and
// answer, close; one at a time) and keep-alive requests/s (-workers
// connections, one request at a time each) from the client pod to the server
// pod, direct, through the socket LB and through nftables DNAT, interleaved:
// an iteration is a round of the three rows (doc.go).
func BenchmarkDataPath(b *testing.B) {
	before := report.LoadAvg()
	l := newLab(b)
	res := rounds{}
	round := 0
	for b.Loop() {
		for i := range paths {
			p := paths[(round+i)%len(paths)]
			if p.install != nil {
				p.install(l, b)
			}
			cg := p.cgroup(l)
			conn := l.run(b, cg, clientEnv+"=conn", dstEnv+"="+p.dst, fmt.Sprintf("%s=%d", countEnv, *conns))
			ka := l.run(b, cg, clientEnv+"=keepalive", dstEnv+"="+p.dst,
				fmt.Sprintf("%s=%d", workersEnv, *workers), forEnv+"="+keepFor.String())
			if p.remove != nil {
				p.remove(l, b)
			}
			if conn.SynRetrans > 0 || ka.SynRetrans > 0 {
				b.Logf("round %d, %s: %d SYN retransmissions: its figures hold 1 s stalls", round, p.name, conn.SynRetrans+ka.SynRetrans)
			}
			res[p.name] = append(res[p.name], roundResult{conn, ka})
		}
		round++
	}
	b.StopTimer()
	r := newReport(res)
	for _, g := range r.Ratios {
		for _, v := range g.Values {
			b.Logf("%s, %s: %.3f ± %.3f (95%%)", g.Name, v.Metric, v.Ratio, v.CI95)
		}
	}
	for _, row := range r.Rows.([]rowFigures) {
		b.ReportMetric(row.ConnPerSec, "conn/s:"+row.Name)
		b.ReportMetric(row.ReqPerSec, "req/s:"+row.Name)
	}
	if *reportOut != "" {
		r.Command, r.LoadBefore = commandLine(), before
		if err := report.Write(*reportOut, r); err != nil {
			b.Error(err)
		}
	}
}

// commandLine is the go test command of this run, as typed from the
// module's root (make bench's).
func commandLine() string {
	parts := []string{"go test -run '^$'"}
	for _, name := range []string{"bench", "benchtime"} {
		if f := flag.Lookup("test." + name); f != nil && f.Value.String() != f.DefValue {
			parts = append(parts, fmt.Sprintf("-%s '%s'", name, f.Value))
		}
	}
	parts = append(parts, "./bench/socklb/ -args")
	flag.Visit(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Name, "test.") && f.Name != "report" {
			parts = append(parts, fmt.Sprintf("-%s %s", f.Name, f.Value))
		}
	})
	if *reportOut != "" {
		parts = append(parts, "-report", fromRoot(*reportOut))
	}
	return strings.Join(parts, " ")
}

// fromRoot is file relative to the module's root (go test runs in
// bench/socklb), or as given when it lies outside.
func fromRoot(file string) string {
	root, err := filepath.Abs("../..")
	if err != nil {
		return file
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return file
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || strings.HasPrefix(rel, "..") {
		return abs
	}
	return rel
}
