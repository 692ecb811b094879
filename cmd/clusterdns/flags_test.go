package main

import (
	"net"
	"net/netip"
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
		{name: "defaults", want: Config{ServicesMaxBytes: 32 << 20, Listen: ":53", Zone: "cluster.local", Pods: "insecure",
			ResolvConf: "/etc/resolv.conf", TTL: 5, UpstreamTimeout: 2 * time.Second, MaxConcurrent: 1000, CacheSize: 10000,
			MetricsAddr: "127.0.0.1:9153", LogLevel: "info"}},
		{name: "everything", args: []string{"--services", "s.yaml", "--listen", "127.0.0.1:1053", "--zone", "corp.example",
			"--upstream", "192.0.2.1, 192.0.2.2:5353", "--ttl", "30", "--cache-size", "0", "--metrics-bind-address", "",
			"--pods", "disabled", "--advertise-address", "198.18.0.53,2001:db8:18::53", "--max-concurrent", "50",
			"--log-queries", "--profiling", "--services-max-bytes", "1000"},
			want: Config{ServicesFile: "s.yaml", ServicesMaxBytes: 1000, Listen: "127.0.0.1:1053", Zone: "corp.example", Pods: "disabled",
				Advertise:  []netip.Addr{netip.MustParseAddr("198.18.0.53"), netip.MustParseAddr("2001:db8:18::53")},
				ResolvConf: "/etc/resolv.conf", Upstreams: []string{"192.0.2.1", "192.0.2.2:5353"}, TTL: 30,
				UpstreamTimeout: 2 * time.Second, MaxConcurrent: 50, CacheSize: -1, LogQueries: true, Profiling: true, LogLevel: "info"}},
		{name: "bad pods", args: []string{"--pods", "secure"}, err: `--pods "secure": want insecure, verified or disabled`},
		{name: "bad advertise", args: []string{"--advertise-address", "ns.example"}, err: `--advertise-address "ns.example": not an IP address`},
		{name: "bad max-concurrent", args: []string{"--max-concurrent", "0"}, err: "--max-concurrent 0: must be at least 1"},
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

func TestNSAddrs(t *testing.T) {
	adv := []netip.Addr{netip.MustParseAddr("198.18.0.53")}
	if got := nsAddrs(adv, &net.UDPAddr{IP: net.ParseIP("127.0.0.1"), Port: 53}); !slices.Equal(got, adv) {
		t.Errorf("with --advertise-address: %v", got)
	}
	if got := nsAddrs(nil, &net.UDPAddr{IP: net.ParseIP("198.19.0.1"), Port: 53}); len(got) != 1 || got[0].String() != "198.19.0.1" {
		t.Errorf("with a specific --listen: %v, want 198.19.0.1", got)
	}
	if got := nsAddrs(nil, &net.UDPAddr{IP: net.IPv4zero, Port: 53}); len(got) == 0 {
		t.Error("listening on every address: no address of the host")
	}
}
