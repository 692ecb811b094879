package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/svcproxy/svcproxy/dnsresolve"
	"github.com/svcproxy/svcproxy/dnsresolve/corefile"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// daemon serves what a Corefile asks (-conf), for the life of the process:
// one instance per version of the Corefile, the reload plugin swapping a new
// one in when the file changes. What outlives an instance is here: the
// metrics (CoreDNS's are process-wide too) and the Service watch, which a
// new instance takes over when its source is the same.
type daemon struct {
	flags   *Config
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *dnsresolve.Metrics
	process *processMetrics

	cur    *instance                         // owned by runCorefile's goroutine
	target atomic.Pointer[dnsresolve.Server] // where Snapshots go
	w      atomic.Pointer[watchRun]          // changed by runCorefile's goroutine, read by pump

	indexed atomic.Bool // a Snapshot has been indexed once
}

// processMetrics are the metrics of the health and reload plugins.
type processMetrics struct {
	healthDuration prometheus.Histogram
	healthFailures prometheus.Counter
	reloadFailed   prometheus.Counter
	reloadInfo     *prometheus.GaugeVec
}

func newProcessMetrics(reg prometheus.Registerer) *processMetrics {
	m := &processMetrics{
		// plugin/health/overloaded.go: SlimTimeBuckets, 0.25ms to 2.5s.
		healthDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coredns_health_request_duration_seconds",
			Help: "Histogram of the time (in seconds) each request took.", Buckets: prometheus.ExponentialBuckets(0.00025, 10, 5),
			NativeHistogramBucketFactor: 1.05}),
		healthFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "coredns_health_request_failures_total",
			Help: "The number of times the health check failed."}),
		// plugin/reload/metrics.go
		reloadFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "coredns_reload_failed_total",
			Help: "Counter of the number of failed reload attempts."}),
		reloadInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coredns_reload_version_info",
			Help: "A metric with a constant '1' value labeled by hash, and value which type of hash generated."}, []string{"hash", "value"}),
	}
	reg.MustRegister(m.healthDuration, m.healthFailures, m.reloadFailed, m.reloadInfo)
	return m
}

// runCorefile serves the Corefile cfg.Conf names until ctx is done. A
// Corefile that does not load is an error at once, naming every problem.
func runCorefile(ctx context.Context, cfg *Config, log *slog.Logger) error {
	data, conf, err := loadCorefile(cfg.Conf)
	if err != nil {
		return err
	}
	digest, _ := corefile.Digest(cfg.Conf, data) // Parse read it
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d := &daemon{flags: cfg, log: log, reg: reg, metrics: dnsresolve.NewMetrics(reg), process: newProcessMetrics(reg)}
	registerClientMetrics(reg)
	watch.SetClientLogger(log)
	defer d.stopWatch()

	if d.cur, err = d.start(ctx, conf); err != nil {
		return err
	}
	d.logRunning(digest)
	pumped := make(chan struct{})
	go func() { defer close(pumped); d.pump(ctx) }()
	d.reloadLoop(ctx, data, digest)
	d.shutdown()
	<-pumped
	return nil
}

// loadCorefile reads and parses the Corefile at path.
func loadCorefile(path string) ([]byte, *corefile.Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	conf, err := corefile.Parse(path, data)
	if err != nil {
		return nil, nil, err
	}
	return data, conf, nil
}

func (d *daemon) logRunning(digest [64]byte) {
	hash := fmt.Sprintf("%x", digest)
	d.process.reloadInfo.Reset()
	d.process.reloadInfo.WithLabelValues("sha512", hash).Set(1)
	// CoreDNS's reload plugin logs the same line.
	d.log.Info("Running configuration SHA512 = " + hash)
}

// reloadLoop is the reload plugin: while the running Corefile has it, the
// file is read every interval; a change that parses becomes a new
// instance, a change that does not is logged and counted and the running
// instance stays, as CoreDNS's reload does (its hook in plugin/reload). A
// file that cannot be read or lexed is logged and read again next time.
// It returns when ctx is done.
func (d *daemon) reloadLoop(ctx context.Context, data []byte, digest [64]byte) {
	for {
		r := d.cur.conf.Reload
		if r == nil {
			<-ctx.Done()
			return
		}
		every := r.Interval
		if r.Jitter > 0 { // drawn once per configuration, as CoreDNS does
			every += time.Duration(rand.Int64N(int64(r.Jitter))) - r.Jitter/2
		}
		tick := time.NewTicker(every)
		for changed := false; !changed; {
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
			next, err := readFile(d.flags.Conf)
			if err != nil {
				d.log.Warn("reload: Corefile unreadable; keeping the running one", "err", err)
				continue
			}
			nd, err := corefile.Digest(d.flags.Conf, next)
			if err != nil {
				d.log.Warn("Corefile parse failed; keeping the running one", "err", err)
				continue
			}
			if nd == digest {
				continue
			}
			// Not tried again until it changes, even when it fails.
			digest, data = nd, next
			d.process.reloadInfo.Reset()
			d.process.reloadInfo.WithLabelValues("sha512", fmt.Sprintf("%x", nd)).Set(1)
			changed = d.reload(ctx, data, nd)
		}
		tick.Stop()
	}
}

// reload starts an instance of the Corefile data and retires the running
// one, or keeps the running one and says why. It reports whether it
// swapped.
func (d *daemon) reload(ctx context.Context, data []byte, digest [64]byte) bool {
	d.log.Info("Reloading")
	conf, err := corefile.Parse(d.flags.Conf, data)
	var next *instance
	if err == nil {
		next, err = d.start(ctx, conf)
	}
	if err != nil {
		d.process.reloadFailed.Inc()
		d.log.Error("Corefile changed but reload failed; still serving the last good one", "err", err)
		return false
	}
	old := d.cur
	d.cur = next
	old.stop(d.log, false, 0)
	d.logRunning(digest)
	d.log.Info("Reloading complete")
	return true
}

// shutdown stops the running instance: /ready says "Shutting down" at once,
// DNS and /health go on for the health plugin's lameduck, then everything
// stops (queries in flight get five more seconds).
func (d *daemon) shutdown() {
	var lameduck time.Duration
	if h := d.cur.conf.Health; h != nil {
		lameduck = h.Lameduck
	}
	d.cur.stop(d.log, true, lameduck)
}

// pump hands every Snapshot of the watch to the instance that serves.
func (d *daemon) pump(ctx context.Context) {
	for {
		w := d.w.Load()
		select {
		case <-ctx.Done():
			return
		case <-w.changed:
			continue // a new watch: read its channel
		case snap := <-w.snaps:
			d.index(d.target.Load(), snap)
		}
	}
}

// index hands snap to srv, and says so once, the first time one is indexed.
func (d *daemon) index(srv *dnsresolve.Server, snap *service.Snapshot) {
	if srv == nil || snap == nil || !srv.Update(snap) {
		return
	}
	debug.FreeOSMemory() // see applySnapshots
	if d.indexed.CompareAndSwap(false, true) {
		d.log.Info("first snapshot indexed: ready", "services", snap.Len())
	}
}

// watchRun is one Service watch and what started it.
type watchRun struct {
	key     watchKey
	w       *watch.Watcher
	snaps   <-chan *service.Snapshot
	cancel  context.CancelFunc
	done    chan error
	changed chan struct{} // closed when another watch replaces this one
}

// watchKey is what a watch is made of: a Corefile that changes none of it
// keeps the watch, and with it the Services it has.
type watchKey struct {
	servicesFile, kubeconfig string
	maxBytes                 int64
	pods                     bool
}

// watchFor is the watch an instance of conf needs, from the flags and the
// kubernetes plugin's options.
func (d *daemon) watchFor(conf *corefile.Config) (watchKey, error) {
	k := conf.Kubernetes
	key := watchKey{servicesFile: d.flags.ServicesFile, kubeconfig: d.flags.Kubeconfig, maxBytes: d.flags.ServicesMaxBytes,
		pods: k.Pods == corefile.PodsVerified}
	if k.Kubeconfig != "" {
		if key.servicesFile != "" || (key.kubeconfig != "" && key.kubeconfig != k.Kubeconfig) {
			return key, fmt.Errorf("%s: kubernetes plugin's kubeconfig %s and the --services or --kubeconfig flag: choose one", conf.File, k.Kubeconfig)
		}
		key.kubeconfig = k.Kubeconfig
	}
	return key, nil
}

// ensureWatch makes the watch key describes the one that runs, starting it
// if it is not, and waits for its first Snapshot, so that a new instance
// answers from the start. The watch it replaces stops.
func (d *daemon) ensureWatch(ctx context.Context, key watchKey) error {
	old := d.w.Load()
	if old != nil && old.key == key {
		return nil
	}
	w, err := watch.New(watch.Config{ServicesFile: key.servicesFile, MaxFileBytes: key.maxBytes, Kubeconfig: key.kubeconfig,
		Namespaces: true, Pods: key.pods, Logger: d.log})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	run := &watchRun{key: key, w: w, snaps: w.Subscribe(), cancel: cancel, done: make(chan error, 1), changed: make(chan struct{})}
	go func() { run.done <- w.Run(wctx) }()
	if old != nil && d.cur != nil {
		// The running instance keeps answering from the old watch until
		// the new one has its first Snapshot; one that has none in time is
		// a reload that failed.
		select {
		case <-ctx.Done():
		case err := <-run.done:
			cancel()
			return fmt.Errorf("watch: %w", err)
		case <-time.After(newWatchTimeout):
			cancel()
			<-run.done
			return fmt.Errorf("the kubernetes plugin's new source gave no Services within %v", newWatchTimeout)
		case <-run.snaps: // the first; start indexes w.Latest()
		}
	}
	d.w.Store(run)
	if old != nil {
		close(old.changed)
		old.cancel()
		<-old.done
	}
	return nil
}

// newWatchTimeout bounds how long a reload waits for a new source's first
// Snapshot (CoreDNS's kubernetes plugin waits its startup_timeout, 5s, then
// serves unsynced; a reload here keeps the running Corefile instead).
const newWatchTimeout = 30 * time.Second

func (d *daemon) stopWatch() {
	if w := d.w.Load(); w != nil {
		w.cancel()
		<-w.done
	}
}

// start makes an instance of conf serve: the watch it needs, a Server with
// the latest Snapshot indexed, its sockets and its HTTP servers. Any error
// leaves nothing behind.
func (d *daemon) start(ctx context.Context, conf *corefile.Config) (*instance, error) {
	for _, n := range conf.Ignored {
		d.log.Warn("Corefile option ignored", "notice", n.String())
	}
	key, err := d.watchFor(conf)
	if err != nil {
		return nil, err
	}
	if err := d.ensureWatch(ctx, key); err != nil {
		return nil, err
	}
	inst, err := d.newInstance(ctx, conf, d.cur)
	if err != nil {
		return nil, err
	}
	d.metrics.SetPlugins(conf.Server, handlerPlugins(conf))
	d.target.Store(inst.srv)
	d.index(inst.srv, d.w.Load().w.Latest())
	return inst, nil
}

// serverConfig is what conf asks of a dnsresolve.Server.
func (d *daemon) serverConfig(conf *corefile.Config) dnsresolve.Config {
	k := conf.Kubernetes
	cfg := dnsresolve.Config{
		Zone:         k.ClusterDomain(),
		TTL:          k.TTL,
		Pods:         dnsresolve.PodMode(k.Pods),
		ReverseZones: []string{},
		Namespaces:   k.Namespaces,
		Fallthrough:  []string{},
		CacheSize:    -1,
		LoadBalance:  conf.LoadBalance,
		LogErrors:    conf.Errors != nil,
		LogQueries:   conf.Log,
		Registry:     d.reg,
		Metrics:      d.metrics,
		Logger:       d.log,
		MetricLabels: dnsresolve.MetricLabels{Server: conf.Server, Plugin: responsePlugin(conf)},
	}
	for _, z := range k.Zones {
		if z != cfg.Zone {
			cfg.ReverseZones = append(cfg.ReverseZones, z)
		}
	}
	if k.Fallthrough != nil {
		cfg.Fallthrough = k.Fallthrough
	}
	if f := conf.Forward; f != nil {
		cfg.Upstreams = f.To
		cfg.UpstreamTimeout = f.ReadTimeout
		cfg.MaxConcurrent = f.MaxConcurrent
		if f.MaxConcurrent == 0 { // CoreDNS's default: no bound
			cfg.MaxConcurrent = math.MaxInt
		}
		cfg.MaxFails = f.MaxFails
		if f.MaxFails == 0 { // "max_fails 0": never marked down
			cfg.MaxFails = -1
		}
		cfg.HealthCheckInterval = f.HealthCheck
		cfg.Forward = dnsresolve.ForwardOptions{From: f.From, Except: f.Except, Policy: f.Policy, ForceTCP: f.ForceTCP,
			Failover: f.Failover, HealthCheckNoRec: f.HealthCheckNoRec, HealthCheckDomain: f.HealthCheckDomain}
		if cfg.Forward.Failover == nil {
			cfg.Forward.Failover = []int{} // CoreDNS's default: the first answer is the answer
		}
	}
	if c := conf.Cache; c != nil {
		cfg.Cache = &dnsresolve.CacheOptions{Zones: c.Zones, SuccessCap: c.SuccessCap, DenialCap: c.DenialCap,
			SuccessTTL: c.SuccessTTL, SuccessMinTTL: c.SuccessMinTTL, DenialTTL: c.DenialTTL, DenialMinTTL: c.DenialMinTTL,
			ServfailTTL: c.ServfailTTL, DisableSuccess: c.DisableSuccess, DisableDenial: c.DisableDenial, KeepTTL: c.KeepTTL}
		cfg.MetricLabels.CacheZones = strings.Join(c.Zones, ",")
	}
	if d.flags.UpstreamTimeout != 0 && cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = d.flags.UpstreamTimeout
	}
	return cfg
}

// handlerPlugins are the plugins of conf that handle queries, in CoreDNS's
// order: those coredns_plugin_enabled names (health, ready, reload, bind and
// pprof handle none).
func handlerPlugins(conf *corefile.Config) []string {
	var out []string
	for _, p := range []struct {
		name string
		on   bool
	}{
		{"prometheus", conf.Prometheus != nil}, {"errors", conf.Errors != nil}, {"log", conf.Log},
		{"loadbalance", conf.LoadBalance}, {"cache", conf.Cache != nil}, {"kubernetes", conf.Kubernetes != nil},
		{"loop", conf.Loop}, {"forward", conf.Forward != nil},
	} {
		if p.on {
			out = append(out, p.name)
		}
	}
	return out
}

// responsePlugin is the plugin label CoreDNS v1.14.6 gives a written answer
// in coredns_dns_responses_total: the plugin after prometheus in its chain
// (see dnsresolve.MetricLabels).
func responsePlugin(conf *corefile.Config) string {
	chain := handlerPlugins(conf)
	if i := slices.Index(chain, "prometheus"); i >= 0 && i+1 < len(chain) {
		return chain[i+1]
	}
	return ""
}
