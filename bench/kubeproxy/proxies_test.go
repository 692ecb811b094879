package kubeproxy

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// proxy is one of the programs compared, in one mode.
type proxy struct {
	program string // kubeProxy or svcproxy
	mode    string // iptables, nftables, socklb, hybrid
}

const (
	kubeProxy = "kube-proxy"
	svcproxy  = "svcproxy"
)

func (p proxy) String() string { return p.program + " " + p.mode }

// allProxies are the rows of a round: both programs in the modes both have,
// and svcproxy's socket LB and hybrid.
var allProxies = []proxy{
	{kubeProxy, "iptables"}, {svcproxy, "iptables"},
	{kubeProxy, "nftables"}, {svcproxy, "nftables"},
	{svcproxy, "socklb"}, {svcproxy, "hybrid"},
}

// Where each proxy serves, inside the node: kube-proxy's defaults.
const (
	healthzAddr = "0.0.0.0:10256"
	metricsAddr = "127.0.0.1:10249"
	healthzURL  = "http://127.0.0.1:10256/healthz"
	metricsURL  = "http://127.0.0.1:10249/metrics"
	// defaultMinSyncPeriod and syncPeriod are kube-proxy's defaults,
	// given to both (MIN_SYNC changes the first for both).
	defaultMinSyncPeriod = time.Second
	syncPeriod           = 30 * time.Second
)

// kubeProxyConfig is the KubeProxyConfiguration kube-proxy runs with: its
// defaults, but for what must stay inside the node's namespace. Its
// health and metrics servers bind there (they are in the node's namespace
// with the process); conntrack's sizing is left alone (maxPerCore 0: the
// default would raise nf_conntrack_max and the nf_conntrack module's
// hashsize, which are the machine's, not the namespace's), and so are its
// timeouts (0: leave as is).
func kubeProxyConfig(mode, kubeconfig string, minSync time.Duration) ([]byte, error) {
	period := map[string]any{"minSyncPeriod": minSync.String(), "syncPeriod": syncPeriod.String()}
	return yaml.Marshal(map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"mode":               mode,
		"clientConnection":   map[string]any{"kubeconfig": kubeconfig},
		"hostnameOverride":   nodeName,
		"bindAddress":        "0.0.0.0",
		"healthzBindAddress": healthzAddr,
		"metricsBindAddress": metricsAddr,
		"enableProfiling":    true, // /debug/pprof on the metrics server
		"clusterCIDR":        clusterCIDR.String(),
		"conntrack": map[string]any{"maxPerCore": 0, "min": 0,
			"tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
		"iptables": period,
		"nftables": period,
	})
}

// svcproxyArgs are svcproxy's flags for mode: the same addresses, periods
// and cluster CIDR as kube-proxy's configuration. cgroup is the socket LB's
// cgroup (socklb only); fullSync, when not zero, its full-sync period.
func svcproxyArgs(mode, kubeconfig, cgroup string, minSync, fullSync time.Duration) []string {
	args := []string{"--kubeconfig", kubeconfig, "--mode", mode, "--hostname-override", nodeName,
		"--healthz-bind-address", healthzAddr, "--metrics-bind-address", metricsAddr,
		"--cluster-cidr", clusterCIDR.String(),
		"--min-sync-period", minSync.String(), "--sync-period", syncPeriod.String()}
	if mode == "socklb" {
		// Nothing pinned in the machine's bpffs: the programs go with
		// the process.
		args = append(args, "--socklb-cgroup", cgroup, "--socklb-pin-path", "")
	}
	if fullSync > 0 {
		args = append(args, "--full-sync-period", fullSync.String())
	}
	return args
}

// procStats are a process's CPU time (its own and its waited-for
// children's: iptables-restore, nft) and memory.
type procStats struct {
	cpu      float64 // seconds, user and system, with the children's
	ownCPU   float64 // seconds, the process's own threads only
	rss, hwm int64   // KiB: resident now, and its peak (VmHWM)
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on Linux.
const clockTick = 100

// readProc reads pid's procStats from /proc. Its CPU time counts its
// children's, those it waited for (in its own stat) and those still
// running (in theirs): a sync's iptables-restore that is still at work is
// the proxy's work too.
func readProc(pid int) (procStats, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStats{}, err
	}
	s := procStats{rss: statusKiB(string(status), "VmRSS:"), hwm: statusKiB(string(status), "VmHWM:")}
	for i, p := range descendants(pid) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			if i == 0 {
				return procStats{}, err
			}
			continue // a child that ended meanwhile: its time is in its parent's now
		}
		own, children, err := parseStatCPU(string(stat))
		if err != nil {
			return procStats{}, fmt.Errorf("/proc/%d/stat: %w", p, err)
		}
		s.cpu += own + children
		if i == 0 {
			s.ownCPU = own
		}
	}
	return s, nil
}

// descendants is pid and every process below it, pid first.
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, s := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(s); err == nil && !slices.Contains(out, c) {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// parseStatCPU reads a /proc/PID/stat line: the process's own CPU
// (utime+stime) and its waited-for children's (cutime+cstime), in seconds.
// The fields after the command's name (which may hold spaces and
// parentheses) count from its last ')'.
func parseStatCPU(stat string) (own, children float64, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("no command name in %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime..cstime are fields 14..17.
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("%d fields after the name", len(f))
	}
	var ticks [4]int64
	for j, s := range f[11:15] {
		if ticks[j], err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, 0, err
		}
	}
	return float64(ticks[0]+ticks[1]) / clockTick, float64(ticks[2]+ticks[3]) / clockTick, nil
}

// statusKiB reads a "Key:  123 kB" line of /proc/PID/status.
func statusKiB(status, key string) int64 {
	for line := range strings.Lines(status) {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

// treeRSS is the resident memory of pid and its descendants, in KiB: a
// proxy's own and that of the iptables-restore or nft it runs, as a
// container's memory would count them.
func treeRSS(pid int) int64 {
	var sum int64
	for _, p := range descendants(pid) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p)); err == nil {
			sum += statusKiB(string(b), "VmRSS:")
		}
	}
	return sum
}

// nodeHTTP is an HTTP client whose connections are made inside the node's
// namespace, for the proxies' /healthz and /metrics.
func (topo *topology) nodeHTTP() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := topo.node.Do(func() (err error) {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		MaxIdleConnsPerHost: 2,
	}}
}

// healthz reports whether GET url answers 200.
func healthz(c *http.Client, url string) bool {
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// scrape reads the metric families of url.
func scrape(c *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// histogram is a Prometheus histogram summed over its series (kube-proxy
// labels some by IP family).
type histogram struct {
	Count   uint64    `json:"count"`
	Sum     float64   `json:"sum"`
	Bounds  []float64 `json:"bounds,omitempty"`
	Buckets []uint64  `json:"buckets,omitempty"` // cumulative, per bound
}

// histogramOf sums the series of family name; the zero histogram if absent.
func histogramOf(fams map[string]*dto.MetricFamily, name string) histogram {
	var h histogram
	fam := fams[name]
	if fam == nil {
		return h
	}
	for _, m := range fam.GetMetric() {
		hm := m.GetHistogram()
		if hm == nil {
			continue
		}
		h.Count += hm.GetSampleCount()
		h.Sum += hm.GetSampleSum()
		for i, b := range hm.GetBucket() {
			if math.IsInf(b.GetUpperBound(), 1) {
				break // the count is it; JSON has no +Inf
			}
			if len(h.Bounds) <= i {
				h.Bounds = append(h.Bounds, b.GetUpperBound())
				h.Buckets = append(h.Buckets, 0)
			}
			h.Buckets[i] += b.GetCumulativeCount()
		}
	}
	return h
}

// quantile estimates the q-quantile (0-1) as Prometheus's
// histogram_quantile does: linearly within the bucket it falls in. 0
// without samples (JSON has no NaN); a quantile in the +Inf bucket is the
// highest bound.
func (h histogram) quantile(q float64) float64 {
	if h.Count == 0 || len(h.Bounds) == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	i := slices.IndexFunc(h.Buckets, func(c uint64) bool { return float64(c) >= rank })
	if i < 0 {
		return h.Bounds[len(h.Bounds)-1]
	}
	lo, below := 0.0, uint64(0)
	if i > 0 {
		lo, below = h.Bounds[i-1], h.Buckets[i-1]
	}
	in := h.Buckets[i] - below
	if in == 0 {
		return h.Bounds[i]
	}
	return lo + (h.Bounds[i]-lo)*(rank-float64(below))/float64(in)
}

// sub is h - o (a histogram's growth between two scrapes).
func (h histogram) sub(o histogram) histogram {
	d := histogram{Count: h.Count - o.Count, Sum: h.Sum - o.Sum, Bounds: h.Bounds}
	for i, c := range h.Buckets {
		if i < len(o.Buckets) {
			c -= o.Buckets[i]
		}
		d.Buckets = append(d.Buckets, c)
	}
	return d
}

// stop ends a proxy: SIGTERM, then SIGKILL after 10 s.
func stop(cmd *exec.Cmd, done <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}
