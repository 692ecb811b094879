package kubeproxy

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// settings are one invocation's knobs (bench_test.go reads them).
type settings struct {
	changes   int           // per run, a multiple of 4
	interval  time.Duration // between changes
	fullSync  time.Duration // both proxies' full-sync period; 0: their own (an hour)
	minSync   time.Duration // both proxies' minimum sync period (kube-proxy's default, 1s)
	dataSlice time.Duration // one slice of data-path load
	slices    int           // slices per target and load
	warmup    time.Duration // hybrid: load before the data path, to promote both Services
	seed      uint64
	// iptables is the backend the proxies' iptables commands use
	// (IPTABLES): "nft", "legacy", or "auto", legacy above
	// nftIPTablesLimit endpoints (iptablesBackend).
	iptables string
	logDir   string // where the proxies' logs stay (LOG_DIR); empty: a temporary directory
	// profileDir (PROFILE_DIR): where each run's profiles go: the proxy's
	// Go CPU profile over its first 30 s and over the changes (those after
	// the first 30 s, as Go serves one CPU profile at a time), its heap
	// after them, and, where perf runs, the whole machine's CPU over the
	// changes; empty: none.
	profileDir string
}

// programs are the binaries compared.
type programs struct {
	kubeProxy string // kube-proxy v1.37.2 (with fullSync's period when set)
	svcproxy  string
	// fullSyncFlag: svcproxy has --full-sync-period (it is given then);
	// profilingFlag: it has --profiling (given always, as kube-proxy's
	// enableProfiling is: it costs nothing until a profile is asked for).
	fullSyncFlag, profilingFlag bool
}

// runResult is one proxy's run at one size in one round.
type runResult struct {
	Size  string `json:"size"`
	Proxy string `json:"proxy"`
	Mode  string `json:"mode"`
	Round int    `json:"round"`
	// IPTables is the iptables backend the run's iptables commands used
	// (iptables mode's rules, hybrid's portals, kube-proxy's cleanup).
	IPTables string `json:"iptables"`

	// Cold start: from process start to the last Service's rule working
	// (a probe connection answered through it), and to /healthz 200.
	ColdRuleSeconds    float64 `json:"cold_rule_s"`
	ColdHealthzSeconds float64 `json:"cold_healthz_s"`

	// CPU: the process and the children it waited for (iptables-restore,
	// nft), over the cold start, the changes, and the whole run.
	CPUColdSeconds    float64 `json:"cpu_cold_s"`
	CPUChangesSeconds float64 `json:"cpu_changes_s"`
	CPUSeconds        float64 `json:"cpu_s"`
	// The proxy process's own CPU over the whole run: the rest of
	// CPUSeconds is its children's (iptables-restore, nft).
	CPUOwnSeconds float64 `json:"cpu_own_s"`
	// Memory, KiB: the proxy's peak (VmHWM), its resident memory at the
	// end (steady), and the peak of it and its children together, sampled
	// every 250 ms.
	PeakRSSKiB     int64 `json:"peak_rss_kib"`
	SteadyRSSKiB   int64 `json:"steady_rss_kib"`
	PeakTreeRSSKiB int64 `json:"peak_tree_rss_kib"`

	// Data path, per target ("first", "last", and "direct", the backend
	// past the node): rates over the slices. A target's rate over
	// direct's, measured in the same slices, is what the report compares:
	// the machine's load at the moment, which moves between runs minutes
	// apart, divides out.
	ConnPerSec map[string]float64 `json:"conn_per_s"`
	ReqPerSec  map[string]float64 `json:"req_per_s"`
	SynRetrans int64              `json:"syn_retrans"`

	// Programming latency: each change's, and their percentiles, all and
	// apart for the changes that waited through a full sync.
	Changes []changeResult `json:"-"` // the report keeps the percentiles below
	P50     float64        `json:"p50_s"`
	P90     float64        `json:"p90_s"`
	P99     float64        `json:"p99_s"`
	P99Full float64        `json:"p99_full_sync_s,omitempty"` // changes overlapping a full sync
	P99Rest float64        `json:"p99_rest_s,omitempty"`
	// The proxy's own kubeproxy_network_programming_duration_seconds over
	// the changes, and its estimated percentiles (within its buckets).
	OwnProgramming histogram `json:"own_programming"`
	OwnP50         float64   `json:"own_p50_s"`
	OwnP90         float64   `json:"own_p90_s"`
	OwnP99         float64   `json:"own_p99_s"`
	// Syncs of the rules over the run (kubeproxy_sync_proxy_rules_duration_seconds),
	// and each periodic full sync after the first, as the proxy timed it.
	Syncs     histogram  `json:"syncs"`
	FullSyncs []fullSync `json:"full_syncs,omitempty"`

	Err string `json:"err,omitempty"`
}

// changeResult is one change: when it was written (seconds from the
// proxy's start) and how long until the probe saw it.
type changeResult struct {
	Kind     changeKind `json:"kind"`
	Service  int        `json:"service"`
	At       float64    `json:"at_s"`
	Seconds  float64    `json:"s"`
	Attempts int        `json:"attempts"`
	Timeouts int        `json:"timeouts,omitempty"`
	Waited   float64    `json:"waited_s,omitempty"` // written this much after its slot: its add was not seen yet
	FullSync bool       `json:"full_sync,omitempty"`
	Err      string     `json:"err,omitempty"`
}

// fullSync is one full sync, as seen between two scrapes of the proxy's
// kubeproxy_sync_full_proxy_rules_duration_seconds: it ended between
// After and Before (seconds from the proxy's start), and took Seconds.
type fullSync struct {
	After   float64 `json:"after_s"`
	Before  float64 `json:"before_s"`
	Seconds float64 `json:"s"`
}

// coldLimit bounds the cold start; a proxy that has not programmed the
// last Service by then failed the run.
const coldLimit = 20 * time.Minute

// runOne runs p at the size of c once, in namespaces of its own.
func runOne(t *testing.T, c *cluster, apiKubeconfig string, bins programs, cgs *cgroups, p proxy, st settings, round int) runResult {
	backend := iptablesBackend(st.iptables, c.sz)
	res := runResult{Size: c.sz.String(), Proxy: p.program, Mode: p.mode, Round: round, IPTables: backend}
	topo := newTopology(t, apiKubeconfig)
	dir := t.TempDir()

	clientCmd := topo.client.Command(context.Background(), os.Args[0], "-test.run=^$")
	var cgroup string
	if p.mode == "socklb" {
		var cgDir *os.File
		cgroup, cgDir = cgs.make(t)
		cgroup = netnstest.HostPath(cgroup) // as svcproxy in the node's namespace reaches it
		clientCmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cgDir.Fd())}
	}
	cl := startClient(t, clientCmd)
	t.Cleanup(func() {
		if err := cl.close(); err != nil {
			t.Error(err)
		}
	})

	cmd, err := proxyCommand(topo, p, bins, st, dir, cgroup)
	if err != nil {
		t.Fatal(err)
	}
	if backend == "legacy" {
		cmd.Env = append(os.Environ(), "PATH="+legacyIPTables(t)+":"+os.Getenv("PATH"))
	}
	logDir := dir
	if st.logDir != "" {
		logDir = st.logDir
	}
	logFile, err := os.Create(filepath.Join(logDir, fmt.Sprintf("%s-round%d-%s-%s.log", c.sz, round+1, p.program, p.mode)))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stopProxy := func() {
		if !stopped {
			stopped = true
			stop(cmd, done)
		}
	}
	t.Cleanup(func() {
		stopProxy()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("%s's log, last 4 KiB:\n%s", p, tail(b, 4096))
		}
	})
	pid := cmd.Process.Pid
	since := func(at time.Time) float64 { return at.Sub(start).Seconds() }
	name := fmt.Sprintf("%s-round%d-%s-%s", c.sz, round+1, p.program, p.mode)
	var profiles sync.WaitGroup
	defer profiles.Wait()

	hc := topo.nodeHTTP()
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Go serves one CPU profile at a time: the changes' waits for the cold
	// start's, which may still be running when the changes begin.
	coldProfiled := make(chan struct{})
	if st.profileDir != "" {
		profiles.Go(func() {
			defer close(coldProfiled)
			profile(t, hc, filepath.Join(st.profileDir, name+"-cold.pprof"), 30*time.Second, start)
		})
	}
	mon := &monitor{pid: pid, http: hc, start: start}
	var monWG sync.WaitGroup
	monWG.Go(func() { mon.run(ctx) })
	defer monWG.Wait()
	defer cancel()

	// Cold start: the last Service through a probe, /healthz in parallel.
	fail := func(format string, args ...any) runResult {
		res.Err = fmt.Sprintf(format, args...)
		t.Errorf("%s: %s", p, res.Err)
		return res
	}
	exited := func() error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("%s exited: %v", p, err)
		default:
			return nil
		}
	}
	healthzAt := make(chan time.Time, 1)
	go func() {
		for time.Since(start) < coldLimit && ctx.Err() == nil {
			if healthz(hc, healthzURL) {
				healthzAt <- time.Now()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(healthzAt)
	}()
	last := netip.AddrPortFrom(clusterIP(c.sz.services-1), servicePort).String()
	up, err := cl.do(request{Op: "probe", Kind: "up", Dst: last, For: coldLimit})
	if err != nil {
		return fail("cold start, the last Service %s: %v (%v)", last, err, exited())
	}
	res.ColdRuleSeconds = since(time.Unix(0, up.Seen))
	h, ok := <-healthzAt
	if !ok {
		return fail("cold start: /healthz not 200 within %s (%v)", coldLimit, exited())
	}
	res.ColdHealthzSeconds = since(h)
	cold, err := readProc(pid)
	if err != nil {
		return fail("%v (%v)", err, exited())
	}
	res.CPUColdSeconds = cold.cpu
	t.Logf("%s: cold start %.2f s to the last Service, %.2f s to /healthz 200, %.2f CPU s", p,
		res.ColdRuleSeconds, res.ColdHealthzSeconds, cold.cpu)

	// The data path, first and last Service.
	time.Sleep(2 * time.Second)
	if err := dataPath(cl, c.sz, p, st, &res); err != nil {
		return fail("data path: %v (%v)", err, exited())
	}

	// Programming latency: the changes.
	before, err := readProc(pid)
	if err != nil {
		return fail("%v (%v)", err, exited())
	}
	ownBefore := mon.scrapeNow(t)
	if st.profileDir != "" {
		d := time.Duration(st.changes) * st.interval
		profiles.Go(func() {
			began := time.Now()
			<-coldProfiled
			if left := d - time.Since(began); left >= time.Second {
				profile(t, hc, filepath.Join(st.profileDir, name+"-changes.pprof"), left, time.Now())
			}
		})
		profiles.Go(func() { perfRecord(t, filepath.Join(st.profileDir, name+"-changes.perf"), d) })
	}
	mon.arm()
	begin := time.Now()
	res.Changes = runChanges(ctx, t, c, cl, newSchedule(c.sz, st.changes, st.interval, st.seed))
	for i := range res.Changes {
		res.Changes[i].At += since(begin)
	}
	after, err := readProc(pid)
	if err != nil {
		return fail("%v (%v)", err, exited())
	}
	if st.profileDir != "" {
		heapProfile(t, hc, filepath.Join(st.profileDir, name+"-heap.pprof"))
	}
	ownAfter := mon.scrapeNow(t)
	res.CPUChangesSeconds = after.cpu - before.cpu
	res.CPUSeconds, res.CPUOwnSeconds, res.SteadyRSSKiB, res.PeakRSSKiB = after.cpu, after.ownCPU, after.rss, after.hwm
	res.OwnProgramming = ownAfter.programming.sub(ownBefore.programming)
	res.OwnP50, res.OwnP90, res.OwnP99 = res.OwnProgramming.quantile(0.5), res.OwnProgramming.quantile(0.9), res.OwnProgramming.quantile(0.99)
	res.Syncs = ownAfter.syncs
	cancel()
	monWG.Wait()
	res.PeakTreeRSSKiB = max(mon.peakTree, res.PeakRSSKiB)
	res.FullSyncs = mon.fullSyncs
	markFullSyncs(res.Changes, res.FullSyncs)
	res.P50, res.P90, res.P99, res.P99Full, res.P99Rest = latencyPercentiles(res.Changes)
	if err := exited(); err != nil {
		return fail("%v", err)
	}
	stopProxy()
	var errs []string
	for _, ch := range res.Changes {
		if ch.Err != "" {
			errs = append(errs, ch.Err)
		}
	}
	if len(errs) > 0 {
		return fail("%d of %d changes not seen; first: %s", len(errs), len(res.Changes), errs[0])
	}
	t.Logf("%s: %d changes, p50 %.3f s, p90 %.3f s, p99 %.3f s (own histogram: p50 %.2f, p99 %.2f); %d full syncs; CPU %.1f s; RSS peak %d KiB (with children %d), steady %d KiB",
		p, len(res.Changes), res.P50, res.P90, res.P99, res.OwnP50, res.OwnP99, len(res.FullSyncs), res.CPUSeconds,
		res.PeakRSSKiB, res.PeakTreeRSSKiB, res.SteadyRSSKiB)
	return res
}

// nftIPTablesLimit is the size beyond which "auto" runs the iptables
// commands on the legacy backend: iptables-nft 1.8.9's --noflush restore
// grows about cubically with its input (docs/architecture.md), and at
// 10,000 Services of 3 endpoints neither proxy's first sync ended within
// the 3 minutes the first full run gave it, where at 10,000 endpoints
// both took 6 to 12 s. Both proxies always get the same backend.
const nftIPTablesLimit = 10000

// iptablesBackend is the backend of a run at sz: setting, or for "auto"
// (and "") nft up to nftIPTablesLimit endpoints and legacy beyond.
func iptablesBackend(setting string, sz size) string {
	if setting == "nft" || setting == "legacy" {
		return setting
	}
	if sz.services*sz.endpoints > nftIPTablesLimit {
		return "legacy"
	}
	return "nft"
}

// legacyIPTables returns a directory whose iptables, iptables-restore,
// iptables-save and their ip6tables twins are iptables-legacy's (Debian's
// xtables-legacy-multi, which acts as the name it is called by): first on
// a proxy's PATH, it makes every iptables command of the proxy a legacy one.
func legacyIPTables(t *testing.T) string {
	t.Helper()
	multi, err := exec.LookPath("xtables-legacy-multi")
	if err != nil {
		t.Skipf("IPTABLES=legacy needs xtables-legacy-multi (Debian's iptables): %v", err)
	}
	dir := t.TempDir()
	for _, name := range []string{"iptables", "iptables-restore", "iptables-save", "ip6tables", "ip6tables-restore", "ip6tables-save"} {
		if err := os.Symlink(multi, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// proxyCommand is p's command in the node's namespace.
func proxyCommand(topo *topology, p proxy, bins programs, st settings, dir, cgroup string) (*exec.Cmd, error) {
	if p.program == kubeProxy {
		cfg, err := kubeProxyConfig(p.mode, topo.kubeconfig, st.minSync)
		if err != nil {
			return nil, err
		}
		file := filepath.Join(dir, "kube-proxy.yaml")
		if err := os.WriteFile(file, cfg, 0o644); err != nil {
			return nil, err
		}
		return topo.node.Command(context.Background(), bins.kubeProxy, "--config", file), nil
	}
	full := time.Duration(0)
	if bins.fullSyncFlag {
		full = st.fullSync
	}
	args := svcproxyArgs(p.mode, topo.kubeconfig, cgroup, st.minSync, full)
	if bins.profilingFlag {
		args = append(args, "--profiling") // as kube-proxy's enableProfiling
	}
	return topo.node.Command(context.Background(), bins.svcproxy, args...), nil
}

// dataPath measures new connections/s and keep-alive requests/s to the
// first and the last Service, and straight to the backend past the node
// (direct), in slices that alternate between them. Hybrid first gets load on
// both Services for st.warmup, so that both are promoted to its kernel
// path, as a busy Service would be.
func dataPath(cl *client, sz size, p proxy, st settings, res *runResult) error {
	targets := []struct{ name, dst string }{
		{"first", netip.AddrPortFrom(clusterIP(0), servicePort).String()},
		{"last", netip.AddrPortFrom(clusterIP(sz.services-1), servicePort).String()},
		{"direct", netip.AddrPortFrom(directBackend.Addr(), targetPort).String()},
	}
	if p.mode == "hybrid" && st.warmup > 0 {
		var chans []<-chan reply
		for _, tg := range targets[:2] {
			ch, err := cl.send(request{Op: "conn", Dst: tg.dst, For: st.warmup})
			if err != nil {
				return err
			}
			chans = append(chans, ch)
		}
		for _, ch := range chans {
			if r, ok := <-ch; !ok || r.Err != "" {
				return fmt.Errorf("hybrid warm-up: %s", r.Err)
			}
		}
	}
	type sum struct{ ops, seconds float64 }
	conn, req := map[string]*sum{}, map[string]*sum{}
	for _, tg := range targets {
		conn[tg.name], req[tg.name] = &sum{}, &sum{}
	}
	for s := range st.slices {
		for k := range targets {
			tg := targets[(k+s)%len(targets)]
			r, err := cl.do(request{Op: "conn", Dst: tg.dst, For: st.dataSlice})
			if err != nil {
				return fmt.Errorf("%s: %w", tg.name, err)
			}
			conn[tg.name].ops += float64(r.Ops)
			conn[tg.name].seconds += r.Seconds
			res.SynRetrans += r.SynRetrans
			r, err = cl.do(request{Op: "keepalive", Dst: tg.dst, For: st.dataSlice, Workers: 2})
			if err != nil {
				return fmt.Errorf("%s: %w", tg.name, err)
			}
			req[tg.name].ops += float64(r.Ops)
			req[tg.name].seconds += r.Seconds
			res.SynRetrans += r.SynRetrans
		}
	}
	res.ConnPerSec, res.ReqPerSec = map[string]float64{}, map[string]float64{}
	for _, tg := range targets {
		res.ConnPerSec[tg.name] = conn[tg.name].ops / conn[tg.name].seconds
		res.ReqPerSec[tg.name] = req[tg.name].ops / req[tg.name].seconds
	}
	return nil
}

// changeTimeout bounds how long a change may wait for its add to be seen.
const changeTimeout = 5 * time.Minute

// runChanges writes the schedule's changes at their times and probes each
// until it is seen; a removal or deletion waits for its add or create to be
// seen first. Each result's At is from the start of the changes.
func runChanges(ctx context.Context, t *testing.T, c *cluster, cl *client, sched []change) []changeResult {
	results := make([]changeResult, len(sched))
	seen := make([]chan struct{}, len(sched))
	for i := range seen {
		seen[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	begin := time.Now()
	for i, ch := range sched {
		results[i] = changeResult{Kind: ch.kind, Service: ch.svc}
		if d := time.Until(begin.Add(ch.at)); d > 0 {
			time.Sleep(d)
		}
		if ch.first >= 0 {
			select {
			case <-seen[ch.first]:
			case <-time.After(changeTimeout):
			}
		}
		written := time.Now()
		results[i].At = written.Sub(begin).Seconds()
		results[i].Waited = max(0, written.Sub(begin.Add(ch.at)).Seconds()-0.001)
		if err := c.write(ctx, ch, written); err != nil {
			results[i].Err = err.Error()
			close(seen[i])
			continue
		}
		replies, err := cl.send(probeFor(ch))
		if err != nil {
			results[i].Err = err.Error()
			close(seen[i])
			continue
		}
		wg.Go(func() {
			defer close(seen[i])
			r, ok := <-replies
			switch {
			case !ok:
				results[i].Err = "the client ended"
			case r.Err != "":
				results[i].Err = r.Err
			default:
				results[i].Seconds = time.Unix(0, r.Seen).Sub(written).Seconds()
				results[i].Attempts, results[i].Timeouts = r.Attempts, r.Timeouts
			}
		})
	}
	wg.Wait()
	if err := c.reset(ctx); err != nil {
		t.Error(err)
	}
	return results
}

// markFullSyncs marks the changes whose wait (written to seen) overlapped
// a full sync (its end between two scrapes, its start Seconds before).
func markFullSyncs(changes []changeResult, syncs []fullSync) {
	for i, ch := range changes {
		for _, fs := range syncs {
			if ch.At < fs.Before && ch.At+ch.Seconds > fs.After-fs.Seconds {
				changes[i].FullSync = true
			}
		}
	}
}

// latencyPercentiles are p50, p90 and p99 of the changes seen, p99 of those
// that overlapped a full sync and of the rest (0 where none).
func latencyPercentiles(changes []changeResult) (p50, p90, p99, p99Full, p99Rest float64) {
	var all, full, rest []float64
	for _, ch := range changes {
		if ch.Err != "" {
			continue
		}
		all = append(all, ch.Seconds)
		if ch.FullSync {
			full = append(full, ch.Seconds)
		} else {
			rest = append(rest, ch.Seconds)
		}
	}
	return percentile(all, 50), percentile(all, 90), percentile(all, 99), percentile(full, 99), percentile(rest, 99)
}

// percentile p (0-100) of xs by the nearest-rank method; 0 for none (JSON
// has no NaN).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(float64(len(s))*p/100)) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// monitor samples a running proxy: its memory with its children's every
// 250 ms, its metrics every second (to time its full syncs).
type monitor struct {
	pid   int
	http  *http.Client
	start time.Time

	mu        sync.Mutex
	peakTree  int64
	armed     bool // full syncs are noted from now on
	fullSyncs []fullSync
	lastFull  histogram
	lastAt    time.Time
}

// arm starts noting full syncs: the periodic ones of the changes, not
// the first, which a proxy makes once per IP family (kube-proxy runs an
// IPv6 proxier beside the IPv4 one where the kernel has IPv6).
func (m *monitor) arm() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.armed = true
}

// scraped is what the monitor reads of the proxy's metrics.
type scraped struct {
	programming, syncs, full histogram
}

func (m *monitor) run(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rss := treeRSS(m.pid)
		m.mu.Lock()
		m.peakTree = max(m.peakTree, rss)
		m.mu.Unlock()
		if n%4 == 0 {
			_, _ = m.scrape()
		}
	}
}

// Metric names both proxies export (kube-proxy's pkg/proxy/metrics).
const (
	metricProgramming = "kubeproxy_network_programming_duration_seconds"
	metricSyncs       = "kubeproxy_sync_proxy_rules_duration_seconds"
	metricFullSyncs   = "kubeproxy_sync_full_proxy_rules_duration_seconds"
)

// scrape reads the metrics and notes the full sync that ended since the
// scrape before, once armed, if one did (they are seconds apart, full
// syncs minutes).
func (m *monitor) scrape() (scraped, error) {
	at := time.Now()
	fams, err := scrape(m.http, metricsURL)
	if err != nil {
		return scraped{}, err
	}
	s := scraped{programming: histogramOf(fams, metricProgramming), syncs: histogramOf(fams, metricSyncs),
		full: histogramOf(fams, metricFullSyncs)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.full.Count > m.lastFull.Count && m.armed {
		d := s.full.sub(m.lastFull)
		m.fullSyncs = append(m.fullSyncs, fullSync{After: m.lastAt.Sub(m.start).Seconds(), Before: at.Sub(m.start).Seconds(),
			Seconds: d.Sum / float64(d.Count)})
	}
	if s.full.Count > 0 {
		m.lastFull, m.lastAt = s.full, at
	}
	return s, nil
}

// scrapeNow is scrape for the run's own use: an error fails the test.
func (m *monitor) scrapeNow(t *testing.T) scraped {
	t.Helper()
	s, err := m.scrape()
	if err != nil {
		t.Errorf("scrape %s: %v", metricsURL, err)
	}
	return s
}

// profile asks the proxy for a Go CPU profile of d (/debug/pprof/profile,
// which both serve on their metrics address) as soon as it serves one,
// waiting from start at most a minute, and writes it to file.
func profile(t *testing.T, hc *http.Client, file string, d time.Duration, start time.Time) {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", metricsAddr, int(d.Seconds()))
	c := &http.Client{Transport: hc.Transport, Timeout: d + time.Minute}
	for time.Since(start) < time.Minute {
		resp, err := c.Get(url)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			if err := os.WriteFile(file, b, 0o644); err != nil {
				t.Error(err)
			}
			return
		}
		t.Logf("profile %s: %s %v", url, resp.Status, err)
		return
	}
	t.Logf("profile %s: no answer within a minute", url)
}

// heapProfile writes the proxy's heap profile (/debug/pprof/heap) to file:
// what its steady RSS holds.
func heapProfile(t *testing.T, hc *http.Client, file string) {
	resp, err := hc.Get(fmt.Sprintf("http://%s/debug/pprof/heap", metricsAddr))
	if err != nil {
		t.Logf("heap profile: %v", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Logf("heap profile: %s %v", resp.Status, err)
		return
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Error(err)
	}
}

// perfRecord records the whole machine's CPU for d with perf (sampled at
// 99 Hz, with call graphs) into file, when perf is installed: the
// iptables-restore and nft processes and the kernel's work are not in a Go
// profile. perf report --sort comm,dso reads it.
func perfRecord(t *testing.T, file string, d time.Duration) {
	if _, err := exec.LookPath("perf"); err != nil {
		return
	}
	out, err := exec.Command("perf", "record", "-a", "-g", "-F", "99", "-o", file, "--", "sleep", fmt.Sprint(int(d.Seconds()))).CombinedOutput()
	if err != nil {
		t.Logf("perf record: %v: %s", err, out)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.ToValidUTF8(string(b), "?")
}
