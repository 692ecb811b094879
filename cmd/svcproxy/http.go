package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// dataplane is one proxy mode: what run feeds and the HTTP endpoints read.
type dataplane interface {
	// Mode is the mode that really runs (after any fallback).
	Mode() string
	// Sync makes the dataplane serve snap; an error means part of it is not
	// served yet and will be retried.
	Sync(ctx context.Context, snap *service.Snapshot) error
	// Run owns the dataplane's goroutines until ctx ends, then shuts down.
	Run(ctx context.Context) error
	// Healthy is nil while the last sync succeeded.
	Healthy() error
	// Status is the /status document (JSON).
	Status() any
	// WriteMetrics writes Prometheus text-format samples.
	WriteMetrics(w io.Writer)
}

// endpoints serves /healthz on one address and /metrics, /proxyMode, /status
// on another, as kube-proxy does (10256 and 10249).
type endpoints struct {
	dp       dataplane
	synced   atomic.Bool  // the first sync is done
	lastSync atomic.Int64 // unix nanos of the last successful sync
	log      *slog.Logger
}

func (e *endpoints) markSynced() {
	e.lastSync.Store(time.Now().UnixNano())
	e.synced.Store(true)
}

func (e *endpoints) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	status, msg := http.StatusOK, "ok"
	if !e.synced.Load() {
		status, msg = http.StatusServiceUnavailable, "waiting for the first sync"
	} else if err := e.dp.Healthy(); err != nil {
		status, msg = http.StatusServiceUnavailable, err.Error()
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{
		"status":      msg,
		"mode":        e.dp.Mode(),
		"lastUpdated": time.Unix(0, e.lastSync.Load()).UTC().Format(time.RFC3339Nano),
	})
}

func (e *endpoints) proxyMode(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, e.dp.Mode())
}

func (e *endpoints) status(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(e.dp.Status())
}

func (e *endpoints) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	up := 0
	if e.synced.Load() && e.dp.Healthy() == nil {
		up = 1
	}
	fmt.Fprintf(w, "# HELP svcproxy_healthy 1 when the last sync succeeded.\n# TYPE svcproxy_healthy gauge\nsvcproxy_healthy{mode=%q} %d\n", e.dp.Mode(), up)
	fmt.Fprintf(w, "# HELP svcproxy_last_sync_timestamp_seconds When the last successful sync ended.\n# TYPE svcproxy_last_sync_timestamp_seconds gauge\nsvcproxy_last_sync_timestamp_seconds %.3f\n", float64(e.lastSync.Load())/1e9)
	e.dp.WriteMetrics(w)
}

// serve runs the two HTTP servers until ctx ends. An address of "" or "0"
// turns a server off, as kube-proxy allows.
func (e *endpoints) serve(ctx context.Context, healthzAddr, metricsAddr string) error {
	health := http.NewServeMux()
	health.HandleFunc("/healthz", e.healthz)
	health.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	metrics := http.NewServeMux()
	metrics.HandleFunc("/metrics", e.metrics)
	metrics.HandleFunc("/proxyMode", e.proxyMode)
	metrics.HandleFunc("/status", e.status)
	metrics.HandleFunc("/healthz", e.healthz)

	errc := make(chan error, 2)
	var servers []*http.Server
	for _, s := range []struct {
		addr string
		mux  *http.ServeMux
	}{{healthzAddr, health}, {metricsAddr, metrics}} {
		if s.addr == "" || s.addr == "0" {
			continue
		}
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", s.addr, err)
		}
		srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go func() { errc <- srv.Serve(ln) }()
		e.log.Info("serving", "addr", ln.Addr().String())
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
	for _, srv := range servers {
		_ = srv.Shutdown(sctx)
	}
	return nil
}
