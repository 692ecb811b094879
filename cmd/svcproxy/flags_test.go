package main

import (
	"errors"
	"testing"
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
