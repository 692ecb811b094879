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

// The load (after -args; make bench keeps the defaults). -benchtime Nx
// sets the rounds.
var (
	slices    = flag.Int("slices", 10, "slices per round: in each, every row's new connections, then every row's keep-alive requests")
	conns     = flag.Int("conns", 100, "new connections per row and slice, one at a time")
	keepFor   = flag.Duration("keepalive", 25*time.Millisecond, "how long each row's keep-alive requests run per slice")
	workers   = flag.Int("workers", 2, "keep-alive connections, one worker each")
	reportOut = flag.String("report", "", "also write the figures and ratios as JSON to this `FILE` (for bench/plot; best absolute: go test runs in bench/socklb)")
)

// path is one way from the client pod to the server pod.
type path struct {
	name   string
	cgroup func(*lab) *cgroup // where the client is born
	dst    string
}

// paths are the rows, in the order of a round's first slice; later
// slices rotate it.
var paths = []path{
	{name: "direct", cgroup: func(l *lab) *cgroup { return l.plain },
		dst: netip.AddrPortFrom(serverPod.Addr(), directPort).String()},
	// Untranslated, a connect to the VIP would go to the nftables node,
	// which has no rule for port 80: every figure of this row is of
	// translated connections.
	{name: "socklb", cgroup: func(l *lab) *cgroup { return l.lb },
		dst: net.JoinHostPort(vip.String(), "80")},
	{name: "nftables", cgroup: func(l *lab) *cgroup { return l.plain },
		dst: net.JoinHostPort(vip.String(), "81")},
	// Straight to the pod, from the socket LB's cgroup: connect4 and
	// getpeername4 run and find nothing to translate, as for every
	// connection a pod makes to something that is not a Service in socklb
	// mode. Against direct: the hooks' cost alone.
	{name: "direct-hooked", cgroup: func(l *lab) *cgroup { return l.lb },
		dst: netip.AddrPortFrom(serverPod.Addr(), hookedPort).String()},
}

// rounds holds each row's results, round by round.
type rounds map[string][]roundResult

// roundResult is a row's load of one round, its slices summed.
type roundResult struct {
	Conn, KeepAlive clientResult
}

func (r clientResult) rate() float64 { return float64(r.Ops) / r.Seconds }

func (r clientResult) add(o clientResult) clientResult {
	return clientResult{r.Ops + o.Ops, r.Seconds + o.Seconds, r.SynRetrans + o.SynRetrans, r.Resets + o.Resets}
}

// BenchmarkDataPath: new connections/s (connect, one 64-byte request and
// answer, close; one at a time) and keep-alive requests/s (-workers
// connections, one request at a time each) from the client pod to the server
// pod, direct, through the socket LB and through nftables DNAT. An iteration
// is a round of -slices slices; in each slice every row runs a little of
// each load, so the rows alternate every few milliseconds and meet the same
// load from the rest of the machine (doc.go).
func BenchmarkDataPath(b *testing.B) {
	if err := checkFlags(); err != nil {
		b.Fatal(err)
	}
	before := report.LoadAvg()
	l := newLab(b)
	clients := make([]*client, len(paths))
	for i, p := range paths {
		clients[i] = l.startClient(b, p.name, p.cgroup(l), p.dst)
	}
	res := rounds{}
	round := 0
	for b.Loop() {
		sum := make([]roundResult, len(paths))
		for k := range *slices {
			order := make([]int, len(paths))
			for i := range order {
				order[i] = (round + k + i) % len(paths)
			}
			for _, i := range order {
				sum[i].Conn = sum[i].Conn.add(clients[i].do(b, fmt.Sprintf("conn %d", *conns)))
			}
			for _, i := range order {
				sum[i].KeepAlive = sum[i].KeepAlive.add(clients[i].do(b, "keepalive "+keepFor.String()))
			}
		}
		for i, p := range paths {
			if n := sum[i].Conn.SynRetrans + sum[i].KeepAlive.SynRetrans; n > 0 {
				b.Logf("round %d, %s: %d SYN retransmissions: its figures hold 1 s stalls", round, p.name, n)
			}
			res[p.name] = append(res[p.name], sum[i])
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

// checkFlags says which load flag cannot make a round, naming it.
func checkFlags() error {
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"slices", *slices >= 1}, {"conns", *conns >= 1}, {"workers", *workers >= 1}, {"keepalive", *keepFor > 0},
	} {
		if !f.ok {
			return fmt.Errorf("bench/socklb: -%s %s: must be at least 1 (keepalive: above 0)", f.name, flag.Lookup(f.name).Value)
		}
	}
	return nil
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
