package corefile

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestKubeadm reads kubeadm v1.37.2's default Corefile (testdata/README.md
// says where it comes from): every plugin and option in it is one clusterdns
// implements, with CoreDNS's defaults for what it leaves out.
func TestKubeadm(t *testing.T) {
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 192.0.2.53\nnameserver 2001:db8::53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/kubeadm-v1.37.2.Corefile")
	if err != nil {
		t.Fatal(err)
	}
	// The one path on this machine that the test cannot use as it is.
	data = []byte(strings.Replace(string(data), "/etc/resolv.conf", resolv, 1))
	cfg, err := Parse("Corefile", data)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		File: "Corefile", Listen: ":53", Server: "dns://:53", Zones: []string{"."},
		Errors:     &Errors{},
		Health:     &Health{Addr: ":8080", Lameduck: 5 * time.Second},
		Ready:      &Ready{Addr: ":8181", Monitor: "until-ready"},
		Prometheus: &Prometheus{Addr: ":9153"},
		Kubernetes: &Kubernetes{Zones: []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa."}, Pods: PodsInsecure,
			Fallthrough: []string{"in-addr.arpa.", "ip6.arpa."}, TTL: 30},
		Forward: &Forward{From: ".", To: []string{"192.0.2.53:53", "[2001:db8::53]:53"}, MaxConcurrent: 1000, MaxFails: 2,
			HealthCheck: 500 * time.Millisecond, Policy: "random"},
		Cache: &Cache{Zones: []string{"."}, SuccessCap: 10000, SuccessTTL: 30 * time.Second, SuccessMinTTL: 5 * time.Second,
			DenialCap: 10000, DenialTTL: 30 * time.Second, DenialMinTTL: 5 * time.Second, ServfailTTL: 5 * time.Second,
			DisableSuccess: []string{"cluster.local."}, DisableDenial: []string{"cluster.local."}},
		Loop:        true,
		Reload:      &Reload{Interval: 30 * time.Second, Jitter: 15 * time.Second},
		LoadBalance: true,
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("kubeadm's Corefile:\n got %+v\nwant %+v", cfg, want)
		for _, f := range []struct{ got, want any }{{cfg.Kubernetes, want.Kubernetes}, {cfg.Forward, want.Forward}, {cfg.Cache, want.Cache}} {
			if !reflect.DeepEqual(f.got, f.want) {
				t.Errorf(" got %+v\nwant %+v", f.got, f.want)
			}
		}
	}
	if cd := cfg.Kubernetes.ClusterDomain(); cd != "cluster.local." {
		t.Errorf("cluster domain %q", cd)
	}
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name   string
		conf   string
		check  func(*Config) bool
		notice string // a Notice's text, when one is expected
	}{
		{name: "defaults", conf: ". {\n kubernetes\n forward . 192.0.2.1\n}",
			check: func(c *Config) bool {
				return c.Listen == ":53" && c.Kubernetes.Pods == PodsDisabled && c.Kubernetes.TTL == 5 &&
					reflect.DeepEqual(c.Kubernetes.Zones, []string{"."}) && c.Forward.To[0] == "192.0.2.1:53" && c.Prometheus == nil
			}},
		{name: "bind and a port", conf: ".:1053 {\n bind 127.0.0.1\n kubernetes cluster.local\n}",
			check: func(c *Config) bool { return c.Listen == "127.0.0.1:1053" && c.Server == "dns://127.0.0.1:1053" }},
		{name: "dns scheme", conf: "dns://.:5353 {\n kubernetes cluster.local\n}",
			check: func(c *Config) bool { return c.Listen == ":5353" }},
		{name: "pods verified, fallthrough everywhere, namespaces", conf: ". {\n kubernetes corp.example {\n  pods verified\n  fallthrough\n  namespaces a b\n  ttl 0\n }\n}",
			check: func(c *Config) bool {
				k := c.Kubernetes
				return k.Pods == PodsVerified && reflect.DeepEqual(k.Fallthrough, []string{"."}) && k.TTL == 0 &&
					reflect.DeepEqual(k.Namespaces, []string{"a", "b"}) && k.ClusterDomain() == "corp.example."
			}},
		{name: "forward options", conf: ". {\n kubernetes\n forward example.org 192.0.2.1:5353 dns://192.0.2.2 {\n  except a.example.org\n  policy sequential\n  max_fails 0\n  health_check 2s no_rec domain probe.example\n  force_tcp\n  failover SERVFAIL refused\n  read_timeout 1s\n }\n}",
			check: func(c *Config) bool {
				f := c.Forward
				return f.From == "example.org." && reflect.DeepEqual(f.To, []string{"192.0.2.1:5353", "192.0.2.2:53"}) &&
					f.Policy == "sequential" && f.MaxFails == 0 && f.HealthCheck == 2*time.Second && f.HealthCheckNoRec &&
					f.HealthCheckDomain == "probe.example." && f.ForceTCP && reflect.DeepEqual(f.Failover, []int{dns.RcodeServerFailure, dns.RcodeRefused}) &&
					f.ReadTimeout == time.Second && reflect.DeepEqual(f.Except, []string{"a.example.org."})
			}},
		{name: "cache options", conf: ". {\n kubernetes\n forward . 192.0.2.1\n cache example.org {\n  success 100 60 10\n  denial 50\n  servfail 0s\n  keepttl\n  disable denial\n }\n}",
			check: func(c *Config) bool {
				k := c.Cache
				return reflect.DeepEqual(k.Zones, []string{"example.org."}) && k.SuccessCap == 100 && k.SuccessTTL == time.Minute &&
					k.SuccessMinTTL == 10*time.Second && k.DenialCap == 50 && k.DenialTTL == 30*time.Minute && k.ServfailTTL == 0 &&
					k.KeepTTL && reflect.DeepEqual(k.DisableDenial, []string{"."})
			}},
		{name: "reload's jitter is at most half the interval", conf: ". {\n kubernetes\n forward . 192.0.2.1\n reload 2s 5s\n}",
			check: func(c *Config) bool { return c.Reload.Interval == 2*time.Second && c.Reload.Jitter == time.Second }},
		{name: "an env variable and a snippet", conf: "(common) {\n errors\n}\n.:{$CLUSTERDNS_TEST_PORT} {\n import common\n kubernetes\n forward . 192.0.2.1\n}",
			check: func(c *Config) bool { return c.Listen == ":2053" && c.Errors != nil }},
		{name: "ready monitors continuously", conf: ". {\n kubernetes\n ready localhost:8181 {\n  monitor continuously\n }\n}",
			check: func(c *Config) bool { return *c.Ready == Ready{Addr: "localhost:8181", Monitor: "continuously"} }},
		{name: "startup_timeout is ignored, said", conf: ". {\n kubernetes cluster.local {\n  startup_timeout 10s\n }\n}",
			check: func(c *Config) bool { return c.Kubernetes != nil }, notice: "Corefile:3: kubernetes: startup_timeout ignored: "},
		{name: "expire is ignored, said", conf: ". {\n kubernetes\n forward . 192.0.2.1 {\n  expire 10s\n }\n}",
			check: func(c *Config) bool { return c.Forward != nil }, notice: "Corefile:4: forward: expire ignored: "},
	}
	t.Setenv("CLUSTERDNS_TEST_PORT", "2053")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("Corefile", []byte(tt.conf))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("%+v\nkubernetes %+v\nforward %+v\ncache %+v", c, c.Kubernetes, c.Forward, c.Cache)
			}
			if tt.notice != "" && (len(c.Ignored) != 1 || !strings.HasPrefix(c.Ignored[0].String(), tt.notice)) {
				t.Errorf("notices %v, want one starting %q", c.Ignored, tt.notice)
			}
			if tt.notice == "" && len(c.Ignored) > 0 {
				t.Errorf("notices %v, want none", c.Ignored)
			}
		})
	}
}

// TestParseRefuses: whatever clusterdns does not implement is an error naming
// the file, the line, the plugin (and option) and what to remove.
func TestParseRefuses(t *testing.T) {
	const base = ".:53 {\n    errors\n    kubernetes cluster.local\n    forward . 192.0.2.1\n"
	tests := []struct {
		name string
		conf string
		err  string
	}{
		{name: "a CoreDNS plugin clusterdns lacks", conf: base + "    rewrite name foo.example bar.example\n}",
			err: `Corefile:5: plugin rewrite: clusterdns does not implement it; remove the line "rewrite name foo.example bar.example"`},
		{name: "a plugin with a block", conf: base + "    hosts {\n        192.0.2.9 x.example\n    }\n}",
			err: `Corefile:5: plugin hosts: clusterdns does not implement it; remove the line "hosts {" and its block { ... }`},
		{name: "no such plugin", conf: base + "    kubernets cluster.local\n}",
			err: `Corefile:5: plugin kubernets: no such plugin in CoreDNS v1.14.6 (a typo?); remove the line "kubernets cluster.local"`},
		{name: "a kubernetes option", conf: ".:53 {\n    kubernetes cluster.local {\n        endpoint_pod_names\n    }\n}",
			err: `Corefile:3: plugin kubernetes: option endpoint_pod_names: clusterdns does not implement it; remove the line "endpoint_pod_names" from the kubernetes block`},
		{name: "no such kubernetes option", conf: ".:53 {\n    kubernetes cluster.local {\n        pod insecure\n    }\n}",
			err: `Corefile:3: plugin kubernetes: option pod: no such option of CoreDNS's kubernetes plugin; remove the line "pod insecure"`},
		{name: "pods", conf: ".:53 {\n    kubernetes cluster.local {\n        pods secure\n    }\n}",
			err: `Corefile:3: plugin kubernetes: option pods: "secure": must be one of disabled, verified, insecure`},
		{name: "ttl", conf: ".:53 {\n    kubernetes cluster.local {\n        ttl 3601\n    }\n}",
			err: `Corefile:3: plugin kubernetes: option ttl: "3601": must be in range [0, 3600]`},
		{name: "reverse zone first", conf: ".:53 {\n    kubernetes in-addr.arpa\n}",
			err: `Corefile:2: plugin kubernetes: zones ["in-addr.arpa"]: a zone that is not a reverse zone must come first`},
		{name: "a forward option", conf: ".:53 {\n    forward . 192.0.2.1 {\n        tls_servername dns.example\n    }\n    kubernetes\n}",
			err: `Corefile:3: plugin forward: option tls_servername: clusterdns does not implement it; remove the line "tls_servername dns.example" from the forward block`},
		{name: "a TLS upstream", conf: ".:53 {\n    kubernetes\n    forward . tls://192.0.2.1\n}",
			err: `Corefile:3: plugin forward: upstream "tls://192.0.2.1": tls upstreams are not implemented`},
		{name: "a cache option", conf: base + "    cache 30 {\n        prefetch 10\n    }\n}",
			err: `Corefile:6: plugin cache: option prefetch: clusterdns does not implement it; remove the line "prefetch 10" from the cache block`},
		{name: "twice", conf: base + "    errors\n}",
			err: `Corefile:5: plugin errors: may appear only once in a server block; remove this line`},
		{name: "a second server block", conf: base + "}\nconsul:53 {\n    forward . 192.0.2.2\n}",
			err: `Corefile:7: a second server block (consul:53): clusterdns serves one`},
		{name: "a zone of its own", conf: "example.org:53 {\n    forward . 192.0.2.2\n}",
			err: `server block "example.org:53": zone example.org: clusterdns serves the root zone`},
		{name: "no kubernetes", conf: ".:53 {\n    forward . 192.0.2.1\n}", err: `no kubernetes plugin: clusterdns is a cluster's DNS`},
		{name: "a second cluster zone", conf: ".:53 {\n    kubernetes cluster.local example.org\n}",
			err: `Corefile:2: plugin kubernetes: zone example.org. beside cluster.local.: clusterdns serves one cluster domain and reverse zones; remove example.org`},
		{name: "weighted loadbalance", conf: base + "    loadbalance weighted /w\n}",
			err: `Corefile:5: plugin loadbalance: option weighted: clusterdns does not implement it`},
		{name: "ready's monitor", conf: base + "    ready {\n        monitor sometimes\n    }\n}",
			err: `Corefile:6: plugin ready: option monitor: takes until-ready or continuously, not "sometimes"`},
		{name: "reload too often", conf: base + "    reload 1s\n}",
			err: `Corefile:5: plugin reload: option interval: 1s: must be at least 2s`},
		{name: "a parse error", conf: base + "    health }\n}", err: `Unexpected '}' because no matching opening brace`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("Corefile", []byte(tt.conf))
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v\nwant it to contain %q", err, tt.err)
			}
		})
	}
}

// TestParseReportsAll: every problem at once, not the first only.
func TestParseReportsAll(t *testing.T) {
	_, err := Parse("Corefile", []byte(".:53 {\n rewrite a b\n kubernetes cluster.local {\n  noendpoints\n }\n forward . 192.0.2.1\n}"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"Corefile:2: plugin rewrite", "Corefile:4: plugin kubernetes: option noendpoints"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
}

func TestDigest(t *testing.T) {
	a, err := Digest("Corefile", []byte(".:53 {\n    forward . 192.0.2.1\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	// The tokens and their lines count, as in CoreDNS: spacing within a
	// line does not.
	b, _ := Digest("Corefile", []byte(".:53   {\n\tforward   .   192.0.2.1 # the node's\n}"))
	c, _ := Digest("Corefile", []byte(".:53 {\n    forward . 192.0.2.2\n}\n"))
	if a != b {
		t.Error("spacing and a comment changed the digest")
	}
	if a == c {
		t.Error("another upstream did not change the digest")
	}
}
