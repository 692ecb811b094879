package dnsresolve

import (
	"context"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Defaults of the forwarder's background checks.
const (
	// DefaultMaxFails: consecutive failed exchanges that mark an upstream down
	// (CoreDNS forward's max_fails).
	DefaultMaxFails = 2
	// DefaultMaxConcurrent bounds the client queries waiting for upstreams
	// (kubeadm's Corefile: forward ... { max_concurrent 1000 }).
	DefaultMaxConcurrent = 1000
	// DefaultHealthCheckInterval: how often a down upstream is probed
	// (CoreDNS forward's health_check, 0.5s).
	DefaultHealthCheckInterval = 500 * time.Millisecond
	// DefaultLoopCheckInterval: how often an upstream known to loop is probed
	// again, to find out that the loop is gone.
	DefaultLoopCheckInterval = 10 * time.Second
	// DefaultLoopLogInterval: how often a loop that lasts is logged again.
	DefaultLoopLogInterval = time.Minute
)

// checkIntervals are the periods of runChecks, defaults applied.
type checkIntervals struct {
	health, loop, loopLog time.Duration
}

// runChecks is the forwarder's background goroutine, owned by Serve and
// stopped by ctx: it probes every upstream for a loop once at start, then
// probes the upstreams that are down until they answer, probes the looping
// ones until the loop is gone, and says every loopLog that a loop lasts.
func (f *forwarder) runChecks(ctx context.Context, every checkIntervals) {
	for _, u := range f.upstreams {
		if !u.looping.Load() {
			f.probeLoop(ctx, u)
		}
	}
	health := time.NewTicker(every.health)
	defer health.Stop()
	loop := time.NewTicker(every.loop)
	defer loop.Stop()
	loopLog := time.NewTicker(every.loopLog)
	defer loopLog.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-health.C:
			f.checkHealth(ctx)
		case <-loop.C:
			f.recheckLoops(ctx)
		case <-loopLog.C:
			if l := f.looping(); len(l) > 0 {
				f.log.Error("forwarding loop: not forwarding to these upstreams, /healthz fails until the loop is gone", "upstreams", l)
			}
		}
	}
}

// checkHealth probes every upstream that is down with ". IN NS", as CoreDNS's
// health check does; any answer at all marks it up again.
func (f *forwarder) checkHealth(ctx context.Context) {
	var wg sync.WaitGroup
	for _, u := range f.upstreams {
		if u.healthy() || u.looping.Load() {
			continue
		}
		wg.Go(func() { f.probeHealth(ctx, u) })
	}
	wg.Wait()
}

func (f *forwarder) probeHealth(ctx context.Context, u *upstream) {
	domain := "."
	if f.opts.HealthCheckDomain != "" {
		domain = dns.Fqdn(f.opts.HealthCheckDomain)
	}
	q := new(dns.Msg).SetQuestion(domain, dns.TypeNS)
	q.Id = dns.Id()
	q.RecursionDesired = !f.opts.HealthCheckNoRec
	pctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if _, _, err := f.udp.ExchangeContext(pctx, q, u.addr); err != nil {
		if ctx.Err() == nil {
			f.metrics.proxyHealthFailures.WithLabelValues("forward", u.addr).Inc()
		}
		return
	}
	if !u.healthy() {
		u.fails.Store(0)
		f.log.Info("upstream answers again", "upstream", u.addr)
	}
}
