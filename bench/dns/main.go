// Command dns benchmarks clusterdns with dnsperf on loopback: for each Service
// count it writes a manifests file, starts clusterdns on it, and measures
// queries per second and latency percentiles for names that exist (A records
// of ClusterIP Services) and for NXDOMAINs (names a pod's search path makes:
// "web.default.svc.cluster.local.other.svc.cluster.local"), then the
// resident memory of clusterdns. It prints a Markdown table.
//
// bench/dns/run.sh builds clusterdns and runs this; `make bench` calls it.
//
//	go run ./bench/dns -clusterdns bin/clusterdns -services 2000,20000 -duration 10s
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/errgroup"

	"github.com/svcproxy/svcproxy/dnsresolve"
)

func main() {
	bin := flag.String("clusterdns", "bin/clusterdns", "the clusterdns `binary`")
	dir := flag.String("dir", "", "work `directory` for manifests and query files (default: a temporary one)")
	counts := flag.String("services", "2000,20000", "Service counts to measure, comma-separated")
	duration := flag.Duration("duration", 10*time.Second, "how long dnsperf runs per query set")
	clients := flag.Int("clients", 10, "dnsperf -c: client sockets")
	outstanding := flag.Int("outstanding", 100, "dnsperf -q: queries in flight")
	flag.Parse()

	if *dir == "" {
		d, err := os.MkdirTemp("", "svcp-dnsbench-")
		if err != nil {
			fatal(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	b := &bench{bin: *bin, dir: *dir, duration: *duration, clients: *clients, outstanding: *outstanding}
	var rows []row
	for c := range strings.SplitSeq(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n <= 0 {
			fatal(fmt.Errorf("-services %q: not a positive number", c))
		}
		r, err := b.run(n)
		if err != nil {
			fatal(err)
		}
		rows = append(rows, r...)
	}
	printTable(os.Stdout, rows, b)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench/dns:", err)
	os.Exit(1)
}

type bench struct {
	bin, dir    string
	duration    time.Duration
	clients     int
	outstanding int
}

// row is one measurement: a Service count and a query set.
type row struct {
	services  int
	set       string
	qps       float64
	lost      string
	p50, p90  time.Duration
	p99, p999 time.Duration
	ready     time.Duration // from start to the first Snapshot indexed
	rss, hwm  int64         // kB, after the runs
}

// run measures one Service count: both query sets against one clusterdns.
func (b *bench) run(n int) ([]row, error) {
	manifest := filepath.Join(b.dir, fmt.Sprintf("services-%d.json", n))
	if err := writeManifests(manifest, n); err != nil {
		return nil, err
	}
	sets := []struct{ name, file string }{
		{"cluster names (A)", filepath.Join(b.dir, fmt.Sprintf("cluster-%d.txt", n))},
		{"NXDOMAIN", filepath.Join(b.dir, fmt.Sprintf("nxdomain-%d.txt", n))},
	}
	if err := writeQueries(sets[0].file, sets[1].file, n); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, b.bin, "--services", manifest, "--listen", "127.0.0.1:"+port,
		"--upstream", "127.0.0.1:9", "--metrics-bind-address", "", "-v", "warn")
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	if err := waitReady(ctx, "127.0.0.1:"+port, 3*time.Minute); err != nil {
		return nil, err
	}
	ready := time.Since(start)

	var rows []row
	for _, s := range sets {
		r, err := b.dnsperf(port, s.file, 0)
		if err != nil {
			return nil, fmt.Errorf("%d services, %s: %w", n, s.name, err)
		}
		r.services, r.set, r.ready = n, s.name, ready
		rows = append(rows, r)
	}
	rss, hwm, err := memory(cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].rss, rows[i].hwm = rss, hwm
	}
	return rows, nil
}

// waitReady asks for dns-version.cluster.local TXT until it is answered:
// before the first Snapshot clusterdns answers SERVFAIL.
func waitReady(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	c := &dns.Client{Timeout: time.Second}
	for {
		m := new(dns.Msg).SetQuestion("dns-version.cluster.local.", dns.TypeTXT)
		if r, _, err := c.ExchangeContext(ctx, m, addr); err == nil && r.Rcode == dns.RcodeSuccess {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clusterdns on %s not ready after %v", addr, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dnsperf runs dnsperf with -v (one line per answer, with its latency) and
// reads QPS from its summary and percentiles from the lines. rate > 0 sends
// at most that many queries per second (-Q): latency at a fixed load.
func (b *bench) dnsperf(port, file string, rate int) (row, error) {
	args := []string{"-s", "127.0.0.1", "-p", port, "-d", file,
		"-l", strconv.Itoa(int(b.duration.Seconds())), "-c", strconv.Itoa(b.clients),
		"-q", strconv.Itoa(b.outstanding), "-t", "2", "-v"}
	if rate > 0 {
		args = append(args, "-Q", strconv.Itoa(rate))
	}
	cmd := exec.Command("dnsperf", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return row{}, err
	}
	if err := cmd.Start(); err != nil {
		return row{}, err
	}
	var r row
	var lat []time.Duration
	var g errgroup.Group
	g.Go(func() error {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "> "): // "> NOERROR name A 0.000454"
				f := strings.Fields(line)
				if s, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
					lat = append(lat, time.Duration(s*float64(time.Second)))
				}
			case strings.Contains(line, "Queries per second:"):
				r.qps, _ = strconv.ParseFloat(strings.TrimSpace(strings.SplitN(line, ":", 2)[1]), 64)
			case strings.Contains(line, "Queries lost:"):
				r.lost = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
			}
		}
		return sc.Err()
	})
	if err := g.Wait(); err != nil {
		return row{}, err
	}
	if err := cmd.Wait(); err != nil {
		return row{}, fmt.Errorf("dnsperf: %w", err)
	}
	if len(lat) == 0 {
		return row{}, fmt.Errorf("dnsperf: no answers")
	}
	r.p50, r.p90, r.p99, r.p999 = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99), percentile(lat, 99.9)
	return r, nil
}

// memory reads VmRSS and VmHWM (peak) of a process, in kB.
func memory(pid int) (rss, hwm int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm, nil
}

// freePort returns a port free for UDP and TCP on 127.0.0.1 just now.
func freePort() (string, error) {
	pc, ln, err := dnsresolve.Listen("127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer pc.Close()
	defer ln.Close()
	_, port, err := net.SplitHostPort(pc.LocalAddr().String())
	return port, err
}
