package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svcproxy/svcproxy/bench/report"
	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/internal/manifestgen"
	"github.com/svcproxy/svcproxy/internal/testbin"
	"github.com/svcproxy/svcproxy/service/watch"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// fixedRate is the load at which tail latency is compared: the p99
// target of docs/benchmarks.md ("Cluster DNS") is taken at this rate.
const fixedRate = 10000

// TestCompareCoreDNS is the side-by-side benchmark, not a test: it runs only
// with SVCPROXY_DNS_BENCH=1 (bench/dns/run.sh, `make bench`). For each Service
// count it fills a real API server (etcd and kube-apiserver from test/kapi),
// then runs, one after the other on the same load: CoreDNS v1.14.6 with
// kubeadm's Corefile, clusterdns watching the same API server, and clusterdns
// reading the same Services from a manifests file (and, with BASELINE set to
// another clusterdns binary, that one from both sources). dnsperf measures the
// highest QPS, and latency at a fixed 10,000 QPS; RSS is read after both.
// Last comes dnsmasq answering the same names from a hosts file: the floor
// that the machine and the harness set, and the one clusterdns's targets
// are stated against (p99 at 10,000 QPS at most 2× dnsmasq's, max QPS at
// least 0.8× its). ROUNDS (3) runs them all again, the order rotated from
// round to round; each ratio is the mean of the rounds' with its 95%
// interval.
func TestCompareCoreDNS(t *testing.T) {
	if os.Getenv("SVCPROXY_DNS_BENCH") == "" {
		t.Skip("a benchmark: run bench/dns/run.sh (SVCPROXY_DNS_BENCH=1)")
	}
	for _, tool := range []string{"dnsperf", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	loadBefore := report.LoadAvg()
	root := strings.TrimSuffix(goEnv(t, "GOMOD"), "/go.mod")
	coredns, err := buildCoreDNS(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	// Built as the image ships it (deploy/image): static, without symbol
	// tables. A build with cgo maps the C library and its loader too, about
	// 2 MiB more resident (docs/benchmarks.md).
	bins, err := image.BuildBinaries(t.TempDir(), "clusterdns")
	if err != nil {
		t.Fatal(err)
	}
	clusterdns := bins["clusterdns"]
	duration := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("DURATION")); err == nil {
		duration = d
	}
	counts := cmp.Or(os.Getenv("SERVICES"), "2000,20000")
	rounds, err := strconv.Atoi(cmp.Or(os.Getenv("ROUNDS"), "3"))
	if err != nil || rounds < 1 {
		t.Fatalf("ROUNDS %q: want a count >= 1", os.Getenv("ROUNDS"))
	}
	// BASELINE: a clusterdns binary built from an earlier commit, measured
	// beside the current one (rows "clusterdns baseline").
	baseline := os.Getenv("BASELINE")

	// APISERVER: the kubeconfig of an API server that is already running,
	// perhaps already filled (TestHoldAPIServer keeps one): filling 20,000
	// Services takes half an hour of kube-apiserver's CPU on this machine,
	// which a before/after comparison need not pay every time.
	kubeconfig := os.Getenv("APISERVER")
	if kubeconfig == "" {
		kubeconfig = kapitest.Start(t).Kubeconfig
	}
	cfg := restConfig(t, kubeconfig)
	client, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	createNamespaces(t, client)

	dir := t.TempDir()
	b := &bench{dir: dir, duration: duration, clients: 10, outstanding: 100}
	var rows []cmpRow
	for c := range strings.SplitSeq(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n <= 0 {
			t.Fatalf("SERVICES %q: not a positive number", c)
		}
		manifest := filepath.Join(dir, fmt.Sprintf("services-%d.json", n))
		if err := writeManifests(manifest, n); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		fill(t, client, manifest)
		t.Logf("%d Services and EndpointSlices in the API server (%s)", n, time.Since(began).Round(time.Second))
		queries := filepath.Join(dir, fmt.Sprintf("cluster-%d.txt", n))
		if err := writeQueries(queries, filepath.Join(dir, fmt.Sprintf("nx-%d.txt", n)), n); err != nil {
			t.Fatal(err)
		}
		servers := []server{
			{name: "CoreDNS " + coreDNSVersion + " (kubeadm Corefile, API server)", start: func(port int) *exec.Cmd {
				ports := freePorts(t, 3)
				file := filepath.Join(dir, "Corefile")
				if err := os.WriteFile(file, []byte(corefile(kubeconfig, port, ports[0], ports[1], ports[2], "127.0.0.1:9")), 0o644); err != nil {
					t.Fatal(err)
				}
				return exec.Command(coredns, "-conf", file, "-quiet")
			}},
			{name: "clusterdns (API server)", start: func(port int) *exec.Cmd {
				return exec.Command(clusterdns, "--kubeconfig", kubeconfig, "--listen", "127.0.0.1:"+strconv.Itoa(port),
					"--upstream", "127.0.0.1:9", "--metrics-bind-address", "", "-v", "warn")
			}},
			{name: "clusterdns (manifests file)", start: func(port int) *exec.Cmd {
				return exec.Command(clusterdns, "--services", manifest, "--listen", "127.0.0.1:"+strconv.Itoa(port),
					"--upstream", "127.0.0.1:9", "--metrics-bind-address", "", "-v", "warn")
			}},
		}
		if _, err := exec.LookPath("dnsmasq"); err == nil {
			// The floor: dnsmasq (C, one thread) answering the same names
			// from a hosts file, the least work a server can do for them.
			// What it cannot beat on this machine, under this load, no
			// cluster DNS will: dnsperf and the server share two CPUs.
			hosts := filepath.Join(dir, fmt.Sprintf("hosts-%d", n))
			if err := writeHosts(hosts, n); err != nil {
				t.Fatal(err)
			}
			servers = append(servers, server{name: "dnsmasq (hosts file: the floor)", start: func(port int) *exec.Cmd {
				return exec.Command("dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--pid-file=",
					"--port="+strconv.Itoa(port), "--listen-address=127.0.0.1", "--bind-interfaces",
					"--no-resolv", "--no-hosts", "--addn-hosts="+hosts, "--user=root")
			}})
		} else {
			t.Log("no dnsmasq (Debian package dnsmasq-base): no floor row")
		}
		if baseline != "" {
			// The same two sources with an earlier build, after the current
			// one: before and after a change, in one sitting.
			servers = append(servers,
				server{name: "clusterdns baseline (API server)", start: func(port int) *exec.Cmd {
					return exec.Command(baseline, "--kubeconfig", kubeconfig, "--listen", "127.0.0.1:"+strconv.Itoa(port),
						"--upstream", "127.0.0.1:9", "--metrics-bind-address", "", "-v", "warn")
				}},
				server{name: "clusterdns baseline (manifests file)", start: func(port int) *exec.Cmd {
					return exec.Command(baseline, "--services", manifest, "--listen", "127.0.0.1:"+strconv.Itoa(port),
						"--upstream", "127.0.0.1:9", "--metrics-bind-address", "", "-v", "warn")
				}})
		}
		// Rounds: every server once per round, in an order rotated from
		// round to round, so that the machine's load meets them alike; a
		// ratio is the mean of the rounds' ratios with its 95% interval.
		for round := range rounds {
			for k := range servers {
				s := servers[(k+round)%len(servers)]
				r := measure(t, b, s, queries)
				r.services, r.round = n, round
				rows = append(rows, r)
			}
		}
	}
	printComparison(os.Stdout, rows, b)
	// JSON: also the rows and the ratios as bench/report's JSON, for
	// bench/plot (run.sh makes the path absolute).
	if file := os.Getenv("JSON"); file != "" {
		if err := writeDNSReport(file, root, loadBefore, counts, rounds, rows); err != nil {
			t.Fatal(err)
		}
	}
}

// server is one DNS server under test, started on a port.
type server struct {
	name  string
	start func(port int) *exec.Cmd
}

// cmpRow is one server at one Service count in one round.
type cmpRow struct {
	services   int
	round      int
	name       string
	ready      time.Duration
	qps        float64
	p99Fixed   time.Duration
	p50Fixed   time.Duration
	lostFixed  string
	rss, peak  int64 // kB, after both runs
	qpsLost    string
	fixedQPS   float64
	p99AtLimit time.Duration
}

// measure starts s, waits until it answers for the cluster, runs dnsperf at
// full speed and at the fixed rate, reads its memory, and stops it.
func measure(t *testing.T, b *bench, s server, queries string) cmpRow {
	t.Helper()
	port := freePorts(t, 1)[0]
	cmd := s.start(port)
	cmd.Stderr = os.Stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err := waitAnswers(t.Context(), addr, queries, 5*time.Minute); err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	r := cmpRow{name: s.name, ready: time.Since(began)}
	full, err := b.dnsperf(strconv.Itoa(port), queries, 0)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	fixed, err := b.dnsperf(strconv.Itoa(port), queries, fixedRate)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	r.qps, r.qpsLost, r.p99AtLimit = full.qps, full.lost, full.p99
	r.fixedQPS, r.p50Fixed, r.p99Fixed, r.lostFixed = fixed.qps, fixed.p50, fixed.p99, fixed.lost
	if r.rss, r.peak, err = memory(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: ready %s, %.0f QPS, p99 at %d QPS %s, RSS %d kB", s.name, r.ready.Round(10*time.Millisecond), r.qps, fixedRate, ms(r.p99Fixed), r.rss)
	return r
}

// waitAnswers asks for the last name of the query file until it is answered
// with an address: every Service is indexed (CoreDNS answers before its
// informers synced; clusterdns answers SERVFAIL until its first Snapshot).
func waitAnswers(ctx context.Context, addr, queries string, limit time.Duration) error {
	data, err := os.ReadFile(queries)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	name := strings.Fields(lines[len(lines)-1])[0]
	deadline := time.Now().Add(limit)
	for {
		out, _ := exec.CommandContext(ctx, "dig", "@"+strings.Split(addr, ":")[0], "-p", strings.Split(addr, ":")[1],
			"+short", "+tries=1", "+time=1", name).Output()
		if strings.HasPrefix(strings.TrimSpace(string(out)), "198.18.") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not answered after %v", addr, name, limit)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %s not answered: %w", addr, name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fill creates in the API server the objects of the manifests file that it
// does not hold yet (each Service is followed by its slice), with 32 clients
// at a time.
func fill(t *testing.T, client kubernetes.Interface, manifest string) {
	t.Helper()
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := watch.LoadManifests(manifest, data)
	if err != nil {
		t.Fatal(err)
	}
	have := existing(t, client)
	work := make(chan any)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 32 {
		wg.Go(func() {
			for obj := range work {
				var err error
				switch o := obj.(type) {
				case *v1.Service:
					_, err = client.CoreV1().Services(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
				case *discoveryv1.EndpointSlice:
					_, err = client.DiscoveryV1().EndpointSlices(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
				}
				if err != nil && !apierrors.IsAlreadyExists(err) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok && have[fmt.Sprintf("%T %s/%s", o, m.GetNamespace(), m.GetName())] {
			continue
		}
		work <- o
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d objects not created, first: %v", len(errs), errs[0])
	}
}

// existing returns the Services and EndpointSlices the API server holds, by
// "type namespace/name".
func existing(t *testing.T, client kubernetes.Interface) map[string]bool {
	t.Helper()
	have := make(map[string]bool)
	svcs, err := client.CoreV1().Services("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		have[fmt.Sprintf("%T %s/%s", &svcs.Items[i], svcs.Items[i].Namespace, svcs.Items[i].Name)] = true
	}
	slices, err := client.DiscoveryV1().EndpointSlices("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range slices.Items {
		have[fmt.Sprintf("%T %s/%s", &slices.Items[i], slices.Items[i].Namespace, slices.Items[i].Name)] = true
	}
	return have
}

// createNamespaces creates the benchmark's namespaces, unless they exist.
func createNamespaces(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	for i := range manifestgen.Namespaces {
		_, ns := svcName(i)
		_, err := client.CoreV1().Namespaces().Create(t.Context(), &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// restConfig is the client configuration of the fill: no client-side rate
// limit, and protobuf, as the informers ask for: the API server decodes and
// encodes it for a fraction of JSON's CPU, and the fill is the API server's
// CPU.
func restConfig(t *testing.T, kubeconfig string) rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	return *cfg
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	var keep []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range keep {
		l.Close()
	}
	return out
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// printComparison prints every round's figures and the report's ratios:
// each server against CoreDNS, clusterdns against dnsmasq (the floor), and
// the current build against the baseline, each the mean of the rounds'
// ratios with its 95% interval.
func printComparison(w *os.File, rows []cmpRow, b *bench) {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "\ndnsperf -c %d -q %d -l %d over UDP on loopback, A queries for existing Services; "+
		"fixed rate: dnsperf -Q %d. Load average at the end: %s\n\n",
		b.clients, b.outstanding, int(b.duration.Seconds()), fixedRate, strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Fprintln(w, "| services | round | server | ready after | max QPS | p99 at 10k QPS | p50 at 10k QPS | RSS after | peak RSS |")
	fmt.Fprintln(w, "|---:|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %d | %d | %s | %s | %.0f | %s | %s | %.1f MiB | %.1f MiB |\n", r.services, r.round+1, r.name,
			r.ready.Round(10*time.Millisecond), r.qps, ms(r.p99Fixed), ms(r.p50Fixed), float64(r.rss)/1024, float64(r.peak)/1024)
	}
	for _, g := range newDNSReport(rows).Ratios {
		fmt.Fprintf(w, "\n| %s | mean ± 95%% |\n|---|---:|\n", g.Name)
		for _, v := range g.Values {
			fmt.Fprintf(w, "| %s | %.2f× ± %.2f |\n", v.Metric, v.Ratio, v.CI95)
		}
	}
}
