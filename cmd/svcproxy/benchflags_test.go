package main

import (
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// histogramCount is the sample count of histogram name summed over its
// series (0 when absent).
func histogramCount(fams map[string]*dto.MetricFamily, name string) uint64 {
	var n uint64
	for _, m := range fams[name].GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// --full-sync-period brings the periodic full sync within seconds (the
// kube-proxy benchmark shortens it so that a run holds one): with a
// one-second period and a one-second resync, the full-sync histogram
// counts two more full syncs soon after the first ones (one per IP
// family), in both rule modes.
func TestFullSyncPeriodFlag(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save", "nft")
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(scrapeManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run(mode, func(t *testing.T) {
			p := runSvcproxy(t, "--services", file, "--hostname-override", "node-a", "--mode", mode,
				"--sync-period", "1s", "--full-sync-period", "1s")
			p.waitHealthz(t, http.StatusOK)
			const name = "kubeproxy_sync_full_proxy_rules_duration_seconds"
			first := histogramCount(p.metrics(t), name)
			deadline := time.Now().Add(30 * time.Second)
			for {
				full := histogramCount(p.metrics(t), name)
				if full >= first+2 {
					t.Logf("%d full syncs, %d of them at the start", full, first)
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d full syncs after 30 s with --full-sync-period 1s, %d at the start; want 2 more; log:\n%s", full, first, p.log)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}

// --profiling serves Go's profiler on the metrics address, as kube-proxy's
// enableProfiling does; without it there is none.
func TestProfilingFlag(t *testing.T) {
	netnstest.RequireRoot(t)
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(scrapeManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{true, false} {
		args := []string{"--services", file, "--hostname-override", "node-a", "--mode", "userspace"}
		if on {
			args = append(args, "--profiling")
		}
		p := runSvcproxy(t, args...)
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		if code, _ := p.get(t, "127.0.0.1:10249", "/debug/pprof/cmdline"); code != want {
			t.Errorf("--profiling %v: /debug/pprof/cmdline answers %d, want %d", on, code, want)
		}
	}
}
