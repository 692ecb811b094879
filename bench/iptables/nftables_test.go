package iptables

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/bench/report"
	svcdataplane "github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	nftoffload "github.com/svcproxy/svcproxy/offload/nftables"
	"github.com/svcproxy/svcproxy/service"
)

// The nftables dataplane (offload/nftables), measured the same way as the iptables
// one and next to it: the same Cluster, the same topology, the same `make bench`.

var nftRules = nftoffload.Config{Node: svcdataplane.Node{NodeName: "node-a"}}

func newNFTProxier(b *testing.B, ns *netnstest.NS) *nftoffload.Dataplane {
	b.Helper()
	var nft knft.Interface
	if err := ns.Do(func() (err error) {
		nft, err = knft.New(nftoffload.Table)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return newNFTProxierOn(b, nft)
}

func newNFTProxierOn(b *testing.B, nft knft.Interface) *nftoffload.Dataplane {
	b.Helper()
	// SyncPeriod: an hour, so that no sync of a benchmark also pays for the
	// periodic check of the table (newDataplaneOn says why).
	cfg := nftRules
	cfg.NFT, cfg.SyncPeriod = nft, time.Hour
	p, err := nftoffload.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func nftSync(b *testing.B, ns *netnstest.NS, p *nftoffload.Dataplane, snap *service.Snapshot) {
	b.Helper()
	if err := ns.Do(func() error { return p.Sync(context.Background(), snap) }); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkNFTFullSync: a full sync into an empty kernel (a new node: one
// transaction creates the table) and into the table an earlier process left (a
// restart: the table's names are listed, then every chain is rewritten in one
// transaction).
func BenchmarkNFTFullSync(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("cold/ports=%d", n), func(b *testing.B) {
			netnstest.RequireRoot(b, "nft")
			snap := Cluster(n)
			var cpu cpuTimes
			var peak uint64
			for range b.N {
				b.StopTimer()
				ns := netnstest.New(b)
				p := newNFTProxier(b, ns)
				runtime.GC() // the sync's own peak, not the last one's garbage
				b.StartTimer()
				start := readCPU()
				stop := sampleHeap(&peak)
				nftSync(b, ns, p, snap)
				stop()
				cpu = cpu.add(start.since())
				b.StopTimer()
				b.ReportMetric(float64(p.Health().Operations), "operations")
				b.StartTimer()
			}
			cpu.report(b)
			keep(b, map[string]float64{"peak-heap-MiB": float64(peak) / (1 << 20)})
		})
		b.Run(fmt.Sprintf("restart/ports=%d", n), func(b *testing.B) {
			netnstest.RequireRoot(b, "nft")
			ns := netnstest.New(b)
			snap := Cluster(n)
			nftSync(b, ns, newNFTProxier(b, ns), snap)
			b.ResetTimer()
			var cpu cpuTimes
			for range b.N {
				b.StopTimer()
				p := newNFTProxier(b, ns)
				b.StartTimer()
				start := readCPU()
				nftSync(b, ns, p, snap)
				cpu = cpu.add(start.since())
			}
			cpu.report(b)
			keep(b, nil)
		})
	}
}

// BenchmarkNFTOneServiceChange is a partial sync after one Service's endpoints
// changed (a pod replaced): only that port's chains and elements are written.
func BenchmarkNFTOneServiceChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			netnstest.RequireRoot(b, "nft")
			ns := netnstest.New(b)
			snap := Cluster(n)
			p := newNFTProxier(b, ns)
			nftSync(b, ns, p, snap)
			// The Snapshots are made beforehand: making one (10,000 Services) in
			// the loop would leave its garbage to the GC during the next sync.
			changed, states := n/2, make([]*service.Snapshot, b.N)
			for i := range states {
				states[i] = Replace(snap, changed, Service(changed, i+1))
			}
			runtime.GC()
			b.ResetTimer()
			var cpu cpuTimes
			for i := range b.N {
				start := readCPU()
				nftSync(b, ns, p, states[i])
				cpu = cpu.add(start.since())
			}
			b.StopTimer()
			cpu.report(b)
			if h := p.Health(); h.PartialSyncs != uint64(b.N) {
				b.Fatalf("health %+v: want %d partial syncs", h, b.N)
			}
			keep(b, map[string]float64{"operations": float64(p.Health().Operations)})
		})
	}
}

// nftDiscard is a kernel that accepts every transaction and keeps nothing: it
// isolates svcproxy's own work in a sync (render, diff, transaction) from nft's.
type nftDiscard struct{ *knftables.Fake }

func (nftDiscard) Run(context.Context, *knftables.Transaction) error { return nil }

// RunParts makes every part, as kernel/nftables' Real does, and keeps none.
func (d nftDiscard) RunParts(_ context.Context, parts iter.Seq[func(*knftables.Transaction)]) (int, error) {
	n := 0
	for fill := range parts {
		tx := d.NewTransaction()
		fill(tx)
		n += tx.NumOperations()
	}
	return n, nil
}

// CountRules has nothing to count: the check it serves is not part of these
// benchmarks (SyncPeriod is an hour).
func (nftDiscard) CountRules(context.Context, string) (int, error) {
	return 0, errors.New("nftDiscard keeps no rules")
}

// BenchmarkNFTSyncCPU is svcproxy's share of a sync, without nft: a full sync
// renders everything; a one-service change renders one port and compares the rest.
func BenchmarkNFTSyncCPU(b *testing.B) {
	discard := func() knft.Interface { return nftDiscard{knftables.NewFake(knftables.IPv4Family, nftoffload.Table)} }
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("full/ports=%d", n), func(b *testing.B) {
			snap := Cluster(n)
			for b.Loop() {
				p := newNFTProxierOn(b, discard())
				if err := p.Sync(context.Background(), snap); err != nil {
					b.Fatal(err)
				}
			}
			keep(b, nil)
		})
		b.Run(fmt.Sprintf("one-service-change/ports=%d", n), func(b *testing.B) {
			snap := Cluster(n)
			p := newNFTProxierOn(b, discard())
			if err := p.Sync(context.Background(), snap); err != nil {
				b.Fatal(err)
			}
			states := []*service.Snapshot{Replace(snap, n/2, Service(n/2, 1)), snap}
			i := 0
			start := readCPU()
			for b.Loop() {
				i++
				if err := p.Sync(context.Background(), states[i%2]); err != nil {
					b.Fatal(err)
				}
			}
			start.since().report(b)
			keep(b, nil)
		})
	}
}

// cpuTimes is the CPU time (user + system) used by this process and by the
// processes it ran and waited for (nft): on a shared machine a sync's wall time
// counts the other processes too, its CPU time does not.
type cpuTimes struct{ self, children time.Duration }

func readCPU() cpuTimes {
	read := func(who int) time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return cpuTimes{read(syscall.RUSAGE_SELF), read(syscall.RUSAGE_CHILDREN)}
}

// since returns the CPU time used from start to now.
func (start cpuTimes) since() cpuTimes {
	now := readCPU()
	return cpuTimes{now.self - start.self, now.children - start.children}
}

func (t cpuTimes) add(u cpuTimes) cpuTimes { return cpuTimes{t.self + u.self, t.children + u.children} }

// sampleHeap records in peak the largest heap (objects, live or not yet
// collected: what the process's memory follows) it sees until stop is
// called, sampled every millisecond: the transient of a sync, which a
// profile taken after it does not show.
func sampleHeap(peak *uint64) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			*peak = max(*peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-ended }
}

// report adds t per iteration as metrics: svcproxy's CPU (this process: render,
// diff, transaction text, the Go runtime's GC) and nft's (its parser in user time,
// the kernel's commit in system time).
func (t cpuTimes) report(b *testing.B) {
	perOp := func(d time.Duration) float64 { return float64(d) / 1e6 / float64(b.N) }
	b.ReportMetric(perOp(t.self), "svcproxy-cpu-ms/op")
	if t.children > 0 {
		b.ReportMetric(perOp(t.children), "nft-cpu-ms/op")
	}
}

// BenchmarkDataPathInterleaved measures new connections per second through
// iptables and nftables rules side by side, interleaved: each iteration (a round;
// -benchtime Nx runs N) installs each row's rules in turn, makes connsPerRound
// connections through them, and removes them. The rows meet the same machine
// load in every round, so the ratio of two rows in one round is far less noisy
// than the ratio of two rows run minutes apart; the benchmark reports the mean
// of the per-round ratios and its 95% interval.
func BenchmarkDataPathInterleaved(b *testing.B) {
	l := newLabWith(b, []string{"iptables", "iptables-restore", "nft", "sysctl"}, interleavedRows)
	elapsed := make([][]time.Duration, len(l.rows)) // row -> round
	for range b.N {
		for i, dp := range l.rows {
			dp.install(b, l, dp)
			start := l.tcpStats(b)
			elapsed[i] = append(elapsed[i], l.connectN(b, net.JoinHostPort(dp.dst, fmt.Sprint(dp.conn)), connsPerRound))
			if d := l.tcpStats(b).sub(start); d.SynRetrans > 0 {
				b.Logf("%s: %d SYN retransmissions in one round: its figure has 1 s stalls", dp.name, d.SynRetrans)
			}
			dp.remove(b, l)
		}
	}
	rate := func(i, r int) float64 { return connsPerRound / elapsed[i][r].Seconds() }
	metrics := map[string]float64{}
	for i, dp := range l.rows {
		var sum float64
		for r := range elapsed[i] {
			sum += rate(i, r)
		}
		metrics["conn/s:"+dp.name] = sum / float64(b.N)
	}
	idx := func(name string) int {
		return slices.IndexFunc(l.rows, func(d dataplane) bool { return d.name == name })
	}
	for _, q := range []struct{ name, num, den string }{
		{"nft-1/hand", "nft-svcproxy-1", "nft-by-hand"},
		{"nft-10000/nft-1", "nft-svcproxy-10000", "nft-svcproxy-1"},
		{"ipt-1/hand", "ipt-svcproxy-1", "ipt-by-hand"},
		{"ipt-10000/ipt-1", "ipt-svcproxy-10000", "ipt-svcproxy-1"},
	} {
		var ratios []float64
		for r := range b.N {
			ratios = append(ratios, rate(idx(q.num), r)/rate(idx(q.den), r))
		}
		mean, ci := report.MeanCI(ratios)
		metrics["ratio:"+q.name], metrics["ci95:"+q.name] = mean, ci
		b.Logf("%s per round: %s; mean %.3f ± %.3f (95%%)", q.name, fmtRatios(ratios), mean, ci)
	}
	keep(b, metrics)
}

// connsPerRound is about half a second of connections per row and round.
const connsPerRound = 2000

func fmtRatios(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(s, " ")
}

// connectN makes n connections to dst from the client, one at a time, each reading
// the server's one byte, and returns the time they took.
func (l *benchLab) connectN(b *testing.B, dst string, n int) time.Duration {
	b.Helper()
	start := time.Now()
	err := l.client.Do(func() error {
		buf := make([]byte, 1)
		for range n {
			c, err := net.DialTimeout("tcp4", dst, 3*time.Second)
			if err != nil {
				return err
			}
			_, err = c.Read(buf)
			c.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// interleavedRows: hand-written rules and svcproxy with 1 and with 10,000 Services,
// for iptables and for nftables. Each row has its own ports (rowPorts).
func interleavedRows(l *benchLab) []dataplane {
	flushPrerouting := func(b *testing.B, l *benchLab) { l.node.Run(b, "iptables", "-t", "nat", "-F", "PREROUTING") }
	var p *nftoffload.Dataplane // shared by the two svcproxy nft rows of a round
	rows := []dataplane{
		{name: "ipt-by-hand", dst: benchVIP, install: handDNAT, remove: flushPrerouting},
		{name: "ipt-svcproxy-1", dst: benchVIP, install: svcproxyRules(0), remove: cleanup},
		{name: "ipt-svcproxy-10000", dst: benchVIP, install: svcproxyRulesFlushing(9999), remove: flushAll},
		{name: "nft-by-hand", dst: benchVIP, install: handNFT, remove: func(b *testing.B, l *benchLab) {
			l.node.Run(b, "nft", "delete", "table", "ip", "hand")
		}},
		{name: "nft-svcproxy-1", dst: benchVIP, install: func(b *testing.B, l *benchLab, dp dataplane) {
			p = newNFTProxier(b, l.node)
			nftSync(b, l.node, p, service.NewSnapshot([]*service.Service{benchService(l, dp)}, nil))
		}, remove: func(*testing.B, *benchLab) {}},
		// From the 1-Service table, a partial sync adds 9,999 Services; the bench
		// Service sorts last, as in the iptables row (in a map, order is moot).
		{name: "nft-svcproxy-10000", dst: benchVIP, install: func(b *testing.B, l *benchLab, dp dataplane) {
			nftSync(b, l.node, p, service.NewSnapshot(append(Cluster(9999).Services(), benchService(l, dp)), nil))
		}, remove: func(b *testing.B, l *benchLab) {
			l.node.Run(b, "nft", "delete", "table", "ip", nftoffload.Table)
		}},
	}
	for i := range rows {
		rows[i].conn, rows[i].bulk = rowPorts(10 + i) // clear of BenchmarkDataPath's rows
	}
	return rows
}

// handNFT is what one would write by hand in nftables for 3 backends: one rule.
func handNFT(b *testing.B, l *benchLab, dp dataplane) {
	var m []string
	for i, be := range l.backends {
		m = append(m, fmt.Sprintf("%d : %s", i, be))
	}
	rules := fmt.Sprintf("table ip hand {\n\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat;\n"+
		"\t\tip daddr %s tcp dport { %d, %d } dnat to numgen random mod %d map { %s }\n\t}\n}\n",
		benchVIP, dp.conn, dp.bulk, len(l.backends), strings.Join(m, ", "))
	cmd := l.node.Command(context.Background(), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("nft -f: %v: %s\n%s", err, out, rules)
	}
}
