package main

import (
	"cmp"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/svcproxy/svcproxy/internal/kapitest"
)

// TestHoldAPIServer is a tool, not a test: with HOLD=DIR it starts an API
// server (etcd and kube-apiserver from test/kapi), fills it with the largest
// count of SERVICES (default 20000) as TestCompareCoreDNS would, copies its
// kubeconfig to DIR/kubeconfig, and keeps it running until DIR/stop exists,
// the test is interrupted or its timeout nears. TestCompareCoreDNS with
// APISERVER=DIR/kubeconfig then skips the fill:
//
//	HOLD=/tmp/kapi SERVICES=20000 go test -run TestHoldAPIServer -timeout 24h -v ./bench/dns &
//	APISERVER=/tmp/kapi/kubeconfig SERVICES=20000 bench/dns/run.sh
//
// Hold one server per Service count (the rows of a count watch every Service
// in the server): HOLD=/tmp/kapi-20000 SERVICES=20000, then
// APISERVER=/tmp/kapi-20000/kubeconfig SERVICES=20000.
func TestHoldAPIServer(t *testing.T) {
	dir := os.Getenv("HOLD")
	if dir == "" {
		t.Skip("a tool: HOLD=DIR keeps a filled API server running (see the doc comment)")
	}
	n := 0
	for c := range strings.SplitSeq(cmp.Or(os.Getenv("SERVICES"), "20000"), ",") {
		v, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || v <= 0 {
			t.Fatalf("SERVICES %q: not a positive number", c)
		}
		n = max(n, v)
	}
	srv := kapitest.Start(t)
	cfg := restConfig(t, srv.Kubeconfig)
	client, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	createNamespaces(t, client)
	manifest := filepath.Join(t.TempDir(), "services.json")
	if err := writeManifests(manifest, n); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	fill(t, client, manifest)
	t.Logf("%d Services and EndpointSlices in the API server (%s)", n, time.Since(began).Round(time.Second))

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(dir, "kubeconfig"))
	t.Logf("holding the API server: APISERVER=%s; touch %s to stop", filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "stop"))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline, _ := t.Deadline()
	for {
		select {
		case <-sig:
			return
		case <-tick.C:
		}
		if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
			return
		}
		if !deadline.IsZero() && time.Until(deadline) < time.Minute {
			return
		}
	}
}
