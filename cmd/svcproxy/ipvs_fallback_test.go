package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
)

const fallbackManifests = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 198.18.0.10
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
`

// TestIPVSFallback runs the svcproxy binary with --mode ipvs on this machine's
// kernel, which has no IPVS (the IPVS tests run in test/vm's VM): it must say why in
// one log line and run iptables mode, and /proxyMode must say iptables. Before
// that it logs kube-proxy's IPVS deprecation warning once.
func TestIPVSFallback(t *testing.T) {
	if err := kipvs.Available(); err == nil {
		t.Skip("this kernel has IPVS: nothing to fall back from (test/vm covers IPVS mode)")
	}
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save")
	ns := netnstest.New(t)
	var fallback, deprecated []string
	for _, line := range startHelper(t, ns, "--mode", "ipvs") {
		switch {
		case strings.Contains(line, "IPVS not available"):
			fallback = append(fallback, line)
		case strings.Contains(line, ipvsDeprecation):
			// kube-proxy's warning, for the mode chosen (logModeChoice),
			// before the fallback.
			if len(fallback) > 0 {
				t.Errorf("the deprecation warning comes after the fallback line")
			}
			deprecated = append(deprecated, line)
		}
	}
	if len(fallback) != 1 {
		t.Fatalf("want one fallback line, got %d", len(fallback))
	}
	if len(deprecated) != 1 || !strings.Contains(deprecated[0], "level=WARN") {
		t.Errorf("want one warning with kube-proxy's IPVS deprecation, got %q", deprecated)
	}
	for _, want := range []string{"running iptables mode instead", "/proc/net/ip_vs", "kernel has no IPVS"} {
		if !strings.Contains(fallback[0], want) {
			t.Errorf("fallback line %q lacks %q", fallback[0], want)
		}
	}
	mode, err := getIn(ns, "127.0.0.1:10249", "/proxyMode")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(mode) != "iptables" {
		t.Errorf("/proxyMode = %q, want iptables", mode)
	}
}

// startHelper runs the test binary as svcproxy (TestHelperSvcproxy, so no
// build step is needed) in ns with args, on fallbackManifests and loopback
// HTTP addresses, until the test ends. It returns the log up to the
// readiness signal: both HTTP servers listening.
func startHelper(t *testing.T, ns *netnstest.NS, args ...string) []string {
	t.Helper()
	lines, _ := startHelperStop(t, ns, args...)
	return lines
}

// startHelperStop is startHelper, and a function that stops the process
// (SIGTERM) and waits for it, for a test that starts another after it.
func startHelperStop(t *testing.T, ns *netnstest.NS, args ...string) (lines []string, stop func()) {
	t.Helper()
	lines, stop, _ = startHelperProcess(t, ns, args...)
	return lines, stop
}

// startHelperProcess is startHelperStop, and a function that waits for the
// process to end by itself, returning the rest of its log and how it ended.
func startHelperProcess(t *testing.T, ns *netnstest.NS, args ...string) (lines []string, stop func(), exited func() ([]string, error)) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(fallbackManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	return startServing(t, ns, append([]string{"--services", file}, args...)...)
}
