package kubeproxy

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svcproxy/svcproxy/bench/report"
	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/internal/k8sbin"
	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/internal/netnstest"
)

func TestMain(m *testing.M) {
	if os.Getenv(clientEnv) != "" {
		if err := runClient(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// benchEnv turns the comparison on: it is a benchmark of an hour or more,
// never part of `go test ./...` (make bench-kubeproxy sets it).
const benchEnv = "SVCPROXY_KUBEPROXY_BENCH"

// defaultSizes are the clusters compared, Services × endpoints each: from
// 10,000 endpoints in all to 250,000.
const defaultSizes = "1000x10,10000x3,5000x50,40000x3"

// TestCompareKubeProxy is the side-by-side benchmark, not a test: it runs
// only with SVCPROXY_KUBEPROXY_BENCH=1 (make bench-kubeproxy). For each size
// it starts a kube-apiserver and etcd, fills them, and runs every proxy of
// allProxies once per round, one at a time, each in namespaces made for the
// run, in an order rotated every round; then it writes the size's report
// (REPORT_DIR/kubeproxy-SIZE.json) and prints its tables. The knobs, all
// environment variables: SIZES ("1000x10,10000x3"), ROUNDS (3), PROXIES
// ("svcproxy nftables,kube-proxy nftables"; default all), CHANGES (200),
// INTERVAL between changes (the changes outlast one full-sync period),
// FULL_SYNC (both proxies' full-sync period, 60s; 0: their own hour),
// MIN_SYNC (both proxies' minimum sync period, kube-proxy's default 1s),
// IPTABLES (the iptables backend of both: auto, nft or legacy; run_test.go),
// SLICE (0.5s) and SLICES (4) of data-path load, KUBE_PROXY and SVCPROXY
// (binaries to use instead of the built ones), LOG_DIR (keep the proxies'
// logs there), PROFILE_DIR (profile both, Go's pprof and perf: run_test.go).
func TestCompareKubeProxy(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skipf("a benchmark of an hour or more: make bench-kubeproxy (%s=1)", benchEnv)
	}
	netnstest.RequireRoot(t, "iptables-restore", "nft", "sysctl")
	loadBefore := report.LoadAvg()
	began := time.Now()
	st, err := readSettings()
	if err != nil {
		t.Fatal(err)
	}
	sizes, err := parseSizes(cmp.Or(os.Getenv("SIZES"), defaultSizes))
	if err != nil {
		t.Fatal(err)
	}
	proxies, err := parseProxies(os.Getenv("PROXIES"))
	if err != nil {
		t.Fatal(err)
	}
	rounds, err := strconv.Atoi(cmp.Or(os.Getenv("ROUNDS"), "3"))
	if err != nil || rounds < 1 {
		t.Fatalf("ROUNDS %q: want a count >= 1", os.Getenv("ROUNDS"))
	}
	root := moduleRoot(t)
	bins := findPrograms(t, st, root)
	cgs := newCgroups(t)
	reportDir := cmp.Or(os.Getenv("REPORT_DIR"), filepath.Join(root, "docs", "benchmarks"))

	for _, sz := range sizes {
		t.Run(sz.String(), func(t *testing.T) {
			srv := kapitest.Start(t)
			c := &cluster{sz: sz, client: fillClient(t, srv.Kubeconfig)}
			filled := time.Now()
			if err := c.fill(t.Context(), st.changes); err != nil {
				t.Fatalf("fill %s: %v", sz, err)
			}
			t.Logf("%s: %d Services and %d endpoints written in %s", sz, sz.services, sz.services*sz.endpoints,
				time.Since(filled).Round(time.Second))
			sizeLoad := report.LoadAvg()
			var results []runResult
			for round := range rounds {
				for k := range proxies {
					p := proxies[(k+round)%len(proxies)]
					t.Run(fmt.Sprintf("round-%d/%s-%s", round+1, p.program, p.mode), func(t *testing.T) {
						results = append(results, runOne(t, c, srv.Kubeconfig, bins, cgs, p, st, round))
					})
				}
			}
			r := newReport(sz, results, st, bins)
			r.LoadBefore = sizeLoad
			r.Command = commandLine(sz, rounds)
			printTables(os.Stdout, sz, r, results)
			if len(r.Ratios) == 0 {
				t.Logf("no pairing of svcproxy and kube-proxy ran at %s: no report", sz)
				return
			}
			file := filepath.Join(reportDir, "kubeproxy-"+sz.String()+".json")
			if err := report.Write(file, r); err != nil {
				t.Error(err)
			} else {
				t.Logf("report: %s", file)
			}
		})
	}
	t.Logf("all sizes in %s; load average %s before, %s after", time.Since(began).Round(time.Second), loadBefore, report.LoadAvg())
}

// readSettings reads the knobs of TestCompareKubeProxy's environment.
func readSettings() (settings, error) {
	st := settings{changes: 200, fullSync: time.Minute, minSync: defaultMinSyncPeriod, dataSlice: 500 * time.Millisecond, slices: 4,
		warmup: 8 * time.Second, seed: 40, logDir: os.Getenv("LOG_DIR"), profileDir: os.Getenv("PROFILE_DIR"),
		iptables: cmp.Or(os.Getenv("IPTABLES"), "auto")}
	var errs []string
	duration := func(key string, into *time.Duration) {
		if v := os.Getenv(key); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Sprintf("%s %q: want a duration", key, v))
			}
			*into = d
		}
	}
	count := func(key string, into *int) {
		if v := os.Getenv(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				errs = append(errs, fmt.Sprintf("%s %q: want a count >= 1", key, v))
			}
			*into = n
		}
	}
	count("CHANGES", &st.changes)
	count("SLICES", &st.slices)
	duration("FULL_SYNC", &st.fullSync)
	duration("MIN_SYNC", &st.minSync)
	duration("SLICE", &st.dataSlice)
	duration("INTERVAL", &st.interval)
	if st.iptables != "auto" && st.iptables != "nft" && st.iptables != "legacy" {
		errs = append(errs, fmt.Sprintf("IPTABLES %q: want auto, nft or legacy", st.iptables))
	}
	if st.changes%4 != 0 {
		errs = append(errs, fmt.Sprintf("CHANGES %d: want a multiple of 4 (four kinds, in pairs)", st.changes))
	}
	if st.interval == 0 {
		// The changes outlast one full-sync period after the data path,
		// so that each run holds a periodic full sync.
		st.interval = max(300*time.Millisecond, (st.fullSync+20*time.Second)/time.Duration(max(st.changes, 1)))
	}
	if len(errs) > 0 {
		return st, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return st, nil
}

// parseSizes reads "1000x10,10000x3".
func parseSizes(s string) ([]size, error) {
	var out []size
	for f := range strings.SplitSeq(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(f), "x")
		n, err1 := strconv.Atoi(a)
		e, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || n < 2 || e < 1 || n+400 > 65000 {
			return nil, fmt.Errorf("SIZES %q: want SERVICESxENDPOINTS, 2 to 64,600 Services", f)
		}
		out = append(out, size{n, e})
	}
	return out, nil
}

// parseProxies reads "svcproxy nftables,kube-proxy nftables"; empty: all.
func parseProxies(s string) ([]proxy, error) {
	if strings.TrimSpace(s) == "" {
		return allProxies, nil
	}
	var out []proxy
	for f := range strings.SplitSeq(s, ",") {
		prog, mode, _ := strings.Cut(strings.TrimSpace(f), " ")
		p := proxy{prog, mode}
		found := false
		for _, q := range allProxies {
			found = found || q == p
		}
		if !found {
			return nil, fmt.Errorf("PROXIES: %q is none of %v", f, allProxies)
		}
		out = append(out, p)
	}
	return out, nil
}

// findPrograms builds svcproxy as the image ships it, and finds kube-proxy
// v1.37.2 (internal/k8sbin) and, when FULL_SYNC shortens the full syncs,
// builds the same with its FullSyncPeriod changed (build_test.go).
func findPrograms(t *testing.T, st settings, root string) programs {
	t.Helper()
	var p programs
	if p.svcproxy = os.Getenv("SVCPROXY"); p.svcproxy == "" {
		bins, err := image.BuildBinaries(t.TempDir(), "svcproxy")
		if err != nil {
			t.Fatal(err)
		}
		p.svcproxy = bins["svcproxy"]
	}
	help, _ := exec.Command(p.svcproxy, "--help").CombinedOutput()
	p.fullSyncFlag = strings.Contains(string(help), "-full-sync-period")
	p.profilingFlag = strings.Contains(string(help), "-profiling")
	if !p.fullSyncFlag && st.fullSync > 0 {
		t.Logf("svcproxy %s has no --full-sync-period: its full syncs keep their hour", p.svcproxy)
	}
	if p.kubeProxy = os.Getenv("KUBE_PROXY"); p.kubeProxy != "" {
		return p
	}
	bins, err := k8sbin.Build(t.Context(), k8sbin.Config{RepoRoot: root, KubeProxy: true, Log: os.Stderr,
		CachedOnly: os.Getenv("SVCPROXY_KAPI_BUILD") != "1"})
	if err != nil {
		t.Skipf("needs kube-proxy v1.37.2: %v (make bench-kubeproxy builds it)", err)
	}
	p.kubeProxy = bins.KubeProxy
	if st.fullSync > 0 {
		if p.kubeProxy, err = kubeProxyFullSync(t.Context(), root, st.fullSync, bins); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// fillClient is a client for the fill and the changes: protobuf, as the
// controllers write, and no client-side rate limit (the fill is the API
// server's CPU).
func fillClient(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// commandLine is the command that reproduces a size's run.
func commandLine(sz size, rounds int) string {
	var env []string
	for _, k := range []string{"ROUNDS", "PROXIES", "CHANGES", "INTERVAL", "FULL_SYNC", "MIN_SYNC", "IPTABLES", "SLICE", "SLICES"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, fmt.Sprintf("%s=%q", k, v))
		}
	}
	if os.Getenv("ROUNDS") == "" {
		env = append(env, fmt.Sprintf("ROUNDS=%d", rounds))
	}
	return strings.Join(append(env, "SIZES="+sz.String(), "make bench-kubeproxy"), " ")
}
