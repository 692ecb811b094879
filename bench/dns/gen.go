package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"time"
)

// namespaces the Services are spread over.
const namespaces = 50

func svcName(i int) (name, ns string) {
	return fmt.Sprintf("svc-%05d", i), fmt.Sprintf("ns-%02d", i%namespaces)
}

// writeManifests writes n ClusterIP Services, each with one named port and an
// EndpointSlice of two ready endpoints, as one JSON List (parsed much faster
// than YAML at 20,000 Services).
func writeManifests(path string, n int) error {
	if n > 65000 {
		return fmt.Errorf("%d services: more than 198.18.0.0/16 holds", n)
	}
	items := make([]any, 0, 2*n)
	for i := range n {
		name, ns := svcName(i)
		// From 198.18.0.2: the API server gives .1 to its own "kubernetes" Service.
		ip := fmt.Sprintf("198.18.%d.%d", (i+2)/256, (i+2)%256)
		items = append(items, map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{
				"clusterIP": ip,
				"ports":     []any{map[string]any{"name": "http", "port": 80, "protocol": "TCP"}},
			},
		})
		items = append(items, map[string]any{
			"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
			"metadata": map[string]any{
				"name": name + "-1", "namespace": ns,
				"labels": map[string]any{"kubernetes.io/service-name": name},
			},
			"addressType": "IPv4",
			"ports":       []any{map[string]any{"name": "http", "port": 8080, "protocol": "TCP"}},
			"endpoints": []any{
				map[string]any{"addresses": []any{fmt.Sprintf("198.19.%d.%d", (2*i)/256%256, (2*i)%256)}, "conditions": map[string]any{"ready": true}},
				map[string]any{"addresses": []any{fmt.Sprintf("198.19.%d.%d", (2*i+1)/256%256, (2*i+1)%256)}, "conditions": map[string]any{"ready": true}},
			},
		})
	}
	data, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
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
