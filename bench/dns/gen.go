package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/internal/manifestgen"
)

// svcName is the name and namespace of Service i of the manifests.
func svcName(i int) (name, ns string) { return manifestgen.Name(i) }

// writeManifests writes manifestgen's List of n Services to path.
func writeManifests(path string, n int) error {
	data, err := manifestgen.List(n)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// writeHosts writes a hosts file of the n Services' names and ClusterIPs, for
// dnsmasq: the floor row of the comparison.
func writeHosts(path string, n int) error {
	var b strings.Builder
	for i := range n {
		name, ns := svcName(i)
		fmt.Fprintf(&b, "%s %s.%s.svc.cluster.local\n", manifestgen.ClusterIP(i), name, ns)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeQueries writes dnsperf input: 10,000 questions for existing Services,
// and 10,000 that get NXDOMAIN: half for Services that do not exist, half the
// search-path expansions a pod's ndots:5 makes before it asks the full name.
func writeQueries(cluster, nx string, n int) error {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	const lines = 10000
	write := func(path string, line func() string) error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		w := bufio.NewWriter(f)
		for range lines {
			fmt.Fprintln(w, line())
		}
		if err := w.Flush(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	err := write(cluster, func() string {
		name, ns := svcName(rng.IntN(n))
		return fmt.Sprintf("%s.%s.svc.cluster.local A", name, ns)
	})
	if err != nil {
		return err
	}
	return write(nx, func() string {
		name, ns := svcName(rng.IntN(n))
		if rng.IntN(2) == 0 {
			return fmt.Sprintf("no-%s.%s.svc.cluster.local A", name, ns)
		}
		_, other := svcName(rng.IntN(n))
		return fmt.Sprintf("%s.%s.svc.cluster.local.%s.svc.cluster.local A", name, ns, other)
	})
}

// percentile p (0-100) of ds, by the nearest-rank method.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func printTable(w io.Writer, rows []row, b *bench) {
	fmt.Fprintf(w, "dnsperf -c %d -q %d -l %d over UDP on loopback; latency from dnsperf -v per answer.\n\n",
		b.clients, b.outstanding, int(b.duration.Seconds()))
	fmt.Fprintln(w, "| services | queries | QPS | lost | p50 | p90 | p99 | p99.9 | ready after | RSS | peak RSS |")
	fmt.Fprintln(w, "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %.1f MiB | %.1f MiB |\n",
			r.services, r.set, r.qps, r.lost, ms(r.p50), ms(r.p90), ms(r.p99), ms(r.p999),
			r.ready.Round(100*time.Millisecond), float64(r.rss)/1024, float64(r.hwm)/1024)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
