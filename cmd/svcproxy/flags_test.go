package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service/watch"
)

// The node name decides which endpoints are local (externalTrafficPolicy and
// internalTrafficPolicy Local, the health check node port). Left empty it
// would match no endpoint's nodeName, and every Local service would drop.
func TestNodeName(t *testing.T) {
	host := func(name string, err error) func() (string, error) {
		return func() (string, error) { return name, err }
	}
	tests := []struct {
		name, override string
		hostname       func() (string, error)
		want           string
		wantErr        bool
	}{
		{name: "override wins", override: "node-a", hostname: host("laptop", nil), want: "node-a"},
		{name: "hostname by default", hostname: host("laptop", nil), want: "laptop"},
		{name: "lower-cased and trimmed as kube-proxy", override: " Node-A\n", hostname: host("x", nil), want: "node-a"},
		{name: "hostname lower-cased", hostname: host("Worker-1", nil), want: "worker-1"},
		{name: "no hostname", hostname: host("", errors.New("uname failed")), wantErr: true},
		{name: "blank", override: "  ", hostname: host("x", nil), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := nodeName(tt.override, tt.hostname)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("nodeName(%q) = %q, want an error", tt.override, got)
				}
				t.Log(err)
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("nodeName(%q) = %q, %v; want %q", tt.override, got, err, tt.want)
			}
		})
	}
}

// parseFlags fills the node name even without --hostname-override.
func TestParseFlagsNodeName(t *testing.T) {
	cfg, err := parseFlags([]string{"--services", "x.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName == "" {
		t.Fatal("NodeName is empty without --hostname-override; want the hostname")
	}
}

// TestServicesMaxBytes: --services-max-bytes bounds the manifests file as in
// clusterdns (same name, same default); a file beyond it stops svcproxy at
// startup with an error naming the file, its size, the bound and the flag,
// before any rule is touched.
func TestServicesMaxBytes(t *testing.T) {
	cfg, err := parseFlags([]string{"--services", "x.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ServicesMaxBytes != watch.DefaultMaxFileBytes {
		t.Errorf("default --services-max-bytes = %d, want %d", cfg.ServicesMaxBytes, watch.DefaultMaxFileBytes)
	}
	if _, err := parseFlags([]string{"--services-max-bytes", "0"}); err == nil || !strings.Contains(err.Error(), "--services-max-bytes 0") {
		t.Errorf("--services-max-bytes 0: err %v, want one naming the flag", err)
	}

	path := filepath.Join(t.TempDir(), "services.yaml")
	manifest := "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\n" +
		"spec: {clusterIP: 198.18.0.10, ports: [{name: http, port: 80, protocol: TCP}]}\n"
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	// The file must hold still before it is read (settle); backdate it.
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	cfg, err = parseFlags([]string{"--services", path, "--services-max-bytes", "64", "--mode", "userspace"})
	if err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if !errors.Is(err, watch.ErrFileTooLarge) {
		t.Fatalf("run with a %d-byte file and --services-max-bytes 64: %v, want ErrFileTooLarge", len(manifest), err)
	}
	for _, want := range []string{path, fmt.Sprintf("%d bytes", len(manifest)), "64 bytes", "--services-max-bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	t.Log(err)
}

// TestParseFlagsNodePortAddresses: the flag reaches Config, and a bad value
// stops svcproxy before anything runs.
func TestParseFlagsNodePortAddresses(t *testing.T) {
	cfg, err := parseFlags([]string{"--services", "x.yaml", "--node-ip", "198.19.10.1", "--nodeport-addresses", "primary,localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.NodePortAddresses.Primary || len(cfg.NodePortAddresses.CIDRs) != 2 {
		t.Fatalf("NodePortAddresses = %+v", cfg.NodePortAddresses)
	}
	if _, err := parseFlags([]string{"--services", "x.yaml", "--nodeport-addresses", "127.0.0.1"}); err == nil {
		t.Fatal("--nodeport-addresses 127.0.0.1 (no mask) accepted")
	}
}
