package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
// one log line and run iptables mode, and /proxyMode must say iptables.
func TestIPVSFallback(t *testing.T) {
	if err := kipvs.Available(); err == nil {
		t.Skip("this kernel has IPVS: nothing to fall back from (test/vm covers IPVS mode)")
	}
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save")
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(fallbackManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := netnstest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The test binary itself runs as svcproxy (TestHelperSvcproxy), so no
	// build step is needed.
	cmd := ns.Command(ctx, "env", "SVCPROXY_HELPER=1", os.Args[0], "-test.run=^TestHelperSvcproxy$", "--",
		"--mode", "ipvs", "--services", file,
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249")
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// Read the log until both HTTP servers listen: the readiness signal.
	var fallback []string
	var all strings.Builder
	sc := bufio.NewScanner(logs)
	for serving := 0; serving < 2 && sc.Scan(); {
		line := sc.Text()
		all.WriteString(line + "\n")
		switch {
		case strings.Contains(line, "IPVS not available"):
			fallback = append(fallback, line)
		case strings.Contains(line, "msg=serving"):
			serving++
		}
	}
	go io.Copy(io.Discard, logs) // keep the pipe drained until the process ends
	t.Logf("svcproxy log:\n%s", all.String())
	if len(fallback) != 1 {
		t.Fatalf("want one fallback line, got %d", len(fallback))
	}
	for _, want := range []string{"running iptables mode instead", "/proc/net/ip_vs", "kernel has no IPVS"} {
		if !strings.Contains(fallback[0], want) {
			t.Errorf("fallback line %q lacks %q", fallback[0], want)
		}
	}
	mode, err := fallbackGet(ns, "127.0.0.1:10249", "/proxyMode")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(mode) != "iptables" {
		t.Errorf("/proxyMode = %q, want iptables", mode)
	}
}

// fallbackGet makes one GET inside ns: the socket is made on the namespace's thread
// (http.Client would dial on a goroutine of its own, outside the namespace).
func fallbackGet(ns *netnstest.NS, addr, path string) (string, error) {
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return string(b), err
}
