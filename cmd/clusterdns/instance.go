package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/svcproxy/svcproxy/dnsresolve"
	"github.com/svcproxy/svcproxy/dnsresolve/corefile"
)

// instance is one version of the Corefile serving: its Server on its DNS
// sockets, and the HTTP servers of its health, ready, prometheus and pprof
// plugins.
//
// The next instance, a reloaded Corefile's, takes over the sockets of this
// one whose addresses it keeps, as CoreDNS's reload hands its listeners to
// the new servers: the same kernel sockets under new descriptors, so a
// query waiting in a socket's queue when this instance stops is read by the
// next one. Sockets opened anew get SO_REUSEPORT, as CoreDNS's do.
type instance struct {
	conf     *corefile.Config
	srv      *dnsresolve.Server
	cancel   context.CancelFunc // stops the DNS Server
	wg       sync.WaitGroup     // the goroutines below
	https    []*http.Server
	stopping atomic.Bool // /ready: "Shutting down"

	// The sockets, for the next instance to take over; the goroutines
	// above close them.
	pc      net.PacketConn
	ln      net.Listener
	httpLns map[string]net.Listener // by the address the Corefile gives
}

// newInstance opens what conf asks and starts serving; the sockets of prev
// (nil at start) on the addresses conf keeps are taken over, not opened
// anew. On an error it closes what it opened and leaves prev's alone.
func (d *daemon) newInstance(ctx context.Context, conf *corefile.Config, prev *instance) (inst *instance, err error) {
	cfg := d.serverConfig(conf)
	pc, ln, err := listenDNS(conf.Listen, prev)
	if err != nil {
		return nil, err
	}
	cfg.NSAddrs = nsAddrs(d.flags.Advertise, pc.LocalAddr())
	srv, err := dnsresolve.New(cfg)
	if err != nil {
		pc.Close()
		ln.Close()
		return nil, err
	}
	inst = &instance{conf: conf, srv: srv, pc: pc, ln: ln, httpLns: map[string]net.Listener{}}
	var listeners []net.Listener
	defer func() {
		if err != nil {
			pc.Close()
			ln.Close()
			for _, l := range listeners {
				l.Close()
			}
		}
	}()
	type endpoint struct {
		addr string
		h    http.Handler
	}
	var eps []endpoint
	if h := conf.Health; h != nil {
		eps = append(eps, endpoint{h.Addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			// CoreDNS's health plugin: always 200 while the process runs.
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, http.StatusText(http.StatusOK))
		})})
	}
	if r := conf.Ready; r != nil {
		eps = append(eps, endpoint{r.Addr, http.HandlerFunc(inst.serveReady)})
	}
	if p := conf.Prometheus; p != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}))
		eps = append(eps, endpoint{p.Addr, mux})
	}
	if p := conf.Pprof; p != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		eps = append(eps, endpoint{p.Addr, mux})
	}
	for _, ep := range eps {
		l, err := listenHTTP(ep.addr, prev)
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		inst.httpLns[ep.addr] = l
	}

	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	inst.cancel = cancel
	inst.wg.Go(func() {
		if err := srv.Serve(sctx, pc, ln); err != nil {
			d.log.Error("dns server stopped", "listen", conf.Listen, "err", err)
		}
	})
	for i, l := range listeners {
		hs := &http.Server{Handler: eps[i].h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
		inst.https = append(inst.https, hs)
		inst.wg.Go(func() { serveHTTPListener(hs, l, d.log) })
	}
	if h := conf.Health; h != nil {
		inst.wg.Go(func() { d.checkHealth(sctx, h.Addr) })
	}
	d.log.Info("clusterdns serving", "corefile", conf.File, "listen", pc.LocalAddr().String(), "zone", cfg.Zone,
		"pods", cfg.Pods, "upstreams", cfg.Upstreams, "ttl", cfg.TTL, "plugins", handlerPlugins(conf))
	return inst, nil
}

// serveReady is the ready plugin: 200 OK once the kubernetes plugin has
// synced (a Snapshot is indexed) and, here, while no upstream loops; 503
// with the names of the plugins not ready otherwise, and "Shutting down"
// once the process is stopping.
//
// Its monitor option changes nothing here: the kubernetes plugin, the one
// plugin with a readiness, never goes back once synced, so asking it
// again (continuously) or not (until-ready) answers the same; a loop
// stands for CoreDNS's loop plugin ending the process, and is said in
// either mode.
func (inst *instance) serveReady(w http.ResponseWriter, _ *http.Request) {
	if inst.stopping.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "Shutting down")
		return
	}
	var notReady []string
	if !inst.srv.Ready() {
		notReady = append(notReady, "kubernetes")
	}
	if err := inst.srv.Healthy(); err != nil && inst.srv.Ready() {
		notReady = append(notReady, "loop: "+err.Error())
	}
	if len(notReady) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		for i, n := range notReady {
			if i > 0 {
				io.WriteString(w, ",")
			}
			io.WriteString(w, n)
		}
		return
	}
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, http.StatusText(http.StatusOK))
}

// checkHealth is the health plugin's self-check (its overloaded): every
// second it asks its own /health and records how long that took, a failure
// counted, until ctx is done.
func (d *daemon) checkHealth(ctx context.Context, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	url := "http://" + net.JoinHostPort(host, port) + "/health"
	client := http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		start := time.Now()
		resp, err := client.Do(req)
		if ctx.Err() != nil {
			return
		}
		d.process.healthDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			d.process.healthFailures.Inc()
			d.log.Warn("local health request failed", "url", url, "err", err)
			continue
		}
		resp.Body.Close()
	}
}

// stop ends the instance. When the process stops (final), /ready answers
// "Shutting down" at once and DNS and the rest go on for lameduck; then the
// DNS Server stops reading, finishes the queries in flight (up to five
// seconds) and the HTTP servers close. A reload's old instance stops
// without either: the next instance already reads the same sockets, and
// its /ready answers for the process.
func (inst *instance) stop(log *slog.Logger, final bool, lameduck time.Duration) {
	if final {
		inst.stopping.Store(true)
		if lameduck > 0 {
			log.Info("Going into lameduck mode", "for", lameduck)
			time.Sleep(lameduck)
		}
	}
	inst.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, hs := range inst.https {
		_ = hs.Shutdown(ctx)
	}
	inst.wg.Wait()
}

// listenDNS opens the DNS sockets on addr, or takes over prev's when prev
// listens there.
func listenDNS(addr string, prev *instance) (net.PacketConn, net.Listener, error) {
	if prev == nil || prev.conf.Listen != addr {
		return dnsresolve.ListenReusePort(addr)
	}
	pc, err := takeOver(prev.pc.(*net.UDPConn), net.FilePacketConn)
	if err != nil {
		return nil, nil, fmt.Errorf("take over udp %s: %w", addr, err)
	}
	ln, err := takeOver(prev.ln.(*net.TCPListener), net.FileListener)
	if err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("take over tcp %s: %w", addr, err)
	}
	return pc, ln, nil
}

// listenHTTP listens on addr with SO_REUSEPORT, or takes over prev's
// listener on addr.
func listenHTTP(addr string, prev *instance) (net.Listener, error) {
	if prev != nil {
		if l, ok := prev.httpLns[addr]; ok {
			nl, err := takeOver(l.(*net.TCPListener), net.FileListener)
			if err != nil {
				return nil, fmt.Errorf("take over %s: %w", addr, err)
			}
			return nl, nil
		}
	}
	lc := net.ListenConfig{Control: dnsresolve.ReusePort}
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return l, nil
}

// takeOver returns a socket of its own on the kernel socket s has: a
// duplicated descriptor (the same queue of datagrams or connections), which
// stays open when s is closed. It is what Caddy, which CoreDNS runs on, does
// with a listener on a graceful restart.
func takeOver[S interface{ File() (*os.File, error) }, T any](s S, fromFile func(*os.File) (T, error)) (T, error) {
	f, err := s.File()
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close() // fromFile has a descriptor of its own
	return fromFile(f)
}

// serveHTTPListener serves hs on l until hs is shut down.
func serveHTTPListener(hs *http.Server, l net.Listener, log *slog.Logger) {
	if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("http server stopped", "addr", l.Addr().String(), "err", err)
	}
}

// readFile reads a Corefile. A ConfigMap volume's file is a symlink into
// ..data, which the kubelet swaps for each version: reading the path again
// follows the swap.
func readFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("corefile: %w", err)
	}
	return b, nil
}
