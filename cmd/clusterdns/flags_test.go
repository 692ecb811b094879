package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want Config
		err  string
	}{
		{name: "defaults", want: Config{Listen: ":53", Zone: "cluster.local", ResolvConf: "/etc/resolv.conf", TTL: 5,
			UpstreamTimeout: 2 * time.Second, CacheSize: 10000, MetricsAddr: "127.0.0.1:9153", LogLevel: "info"}},
		{name: "everything", args: []string{"--services", "s.yaml", "--listen", "127.0.0.1:1053", "--zone", "corp.example",
			"--upstream", "192.0.2.1, 192.0.2.2:5353", "--ttl", "30", "--cache-size", "0", "--metrics-bind-address", ""},
			want: Config{ServicesFile: "s.yaml", Listen: "127.0.0.1:1053", Zone: "corp.example", ResolvConf: "/etc/resolv.conf",
				Upstreams: []string{"192.0.2.1", "192.0.2.2:5353"}, TTL: 30, UpstreamTimeout: 2 * time.Second, CacheSize: -1, LogLevel: "info"}},
		{name: "both sources", args: []string{"--services", "s.yaml", "--kubeconfig", "k"}, err: "--services and --kubeconfig: choose one"},
		{name: "bad zone", args: []string{"--zone", "a..b"}, err: `--zone "a..b": not a domain name`},
		{name: "stray argument", args: []string{"x"}, err: "unexpected arguments: x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*c, tt.want) {
				t.Errorf("config\n got %+v\nwant %+v", *c, tt.want)
			}
		})
	}
}

func TestResolvConfUpstreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	conf := "# a pod's\nnameserver 10.96.0.10\nnameserver fd00::10\nsearch default.svc.cluster.local\noptions ndots:5\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := resolvConfUpstreams(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.96.0.10:53", "[fd00::10]:53"}; !slices.Equal(got, want) {
		t.Errorf("upstreams %q, want %q", got, want)
	}
	if _, err := resolvConfUpstreams(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("no error for a missing file")
	}
}
