package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// An Endpoint is one of the proxy's own HTTP servers: kube-proxy's healthz
// server (10256) or its metrics server (10249).
type Endpoint struct {
	// Addr is where it listens; "" or "0" turns it off, as kube-proxy allows.
	Addr    string
	Handler http.Handler
}

// ServeOptions say what ServeEndpoints does when an address cannot be
// listened on.
type ServeOptions struct {
	// HardFail: a server that cannot listen ends ServeEndpoints with the
	// error. Otherwise, as kube-proxy without bindAddressHardFail
	// (serveHealthz, serveMetrics: wait.Until every 5 s), the failure is
	// logged and the listen retried every RetryEvery while the others serve.
	HardFail bool
	// RetryEvery is the retry interval; 0 means kube-proxy's 5 s.
	RetryEvery time.Duration
	Log        *slog.Logger
}

// ServeEndpoints runs the servers eps until ctx ends, then shuts them down
// within a second. It returns early with the error of a server that stops.
func ServeEndpoints(ctx context.Context, eps []Endpoint, opt ServeOptions) error {
	if opt.RetryEvery == 0 {
		opt.RetryEvery = 5 * time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	errc := make(chan error, len(eps))
	var mu sync.Mutex
	var running []*http.Server
	var listeners sync.WaitGroup
	for _, ep := range eps {
		if ep.Addr == "" || ep.Addr == "0" {
			continue
		}
		ln, err := net.Listen("tcp", ep.Addr)
		if err != nil && opt.HardFail {
			return fmt.Errorf("listen %s: %w", ep.Addr, err)
		}
		hs := &http.Server{Handler: ep.Handler, ReadHeaderTimeout: 5 * time.Second}
		mu.Lock()
		running = append(running, hs)
		mu.Unlock()
		if err != nil {
			opt.Log.Error("cannot listen, retrying (bindAddressHardFail is off)", "addr", ep.Addr, "err", err, "every", opt.RetryEvery)
			listeners.Add(1)
			go func() {
				defer listeners.Done()
				retryListen(ctx, ep.Addr, opt, hs, errc)
			}()
			continue
		}
		go func() { errc <- hs.Serve(ln) }()
		opt.Log.Info("serving", "addr", ln.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	mu.Lock()
	for _, hs := range running {
		_ = hs.Shutdown(sctx)
	}
	mu.Unlock()
	listeners.Wait()
	return nil
}

// retryListen listens on addr every opt.RetryEvery until it succeeds, then
// serves hs there; it returns when ctx ends.
func retryListen(ctx context.Context, addr string, opt ServeOptions, hs *http.Server, errc chan<- error) {
	t := time.NewTicker(opt.RetryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			opt.Log.Debug("still cannot listen", "addr", addr, "err", err)
			continue
		}
		opt.Log.Info("serving", "addr", ln.Addr().String())
		go func() { errc <- hs.Serve(ln) }()
		return
	}
}
