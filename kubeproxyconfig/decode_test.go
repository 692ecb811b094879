package kubeproxyconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

// A file that is not exactly a KubeProxyConfiguration is refused with an
// error naming the file and the field.
func TestDecodeRefuses(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // each in the error
	}{
		{"unknown field", header + "ipvs:\n  shceduler: rr\n", []string{`f.conf: unknown field "ipvs.shceduler"`}},
		{"field of another case", header + "Mode: ipvs\n", []string{`unknown field "Mode"`}},
		{"two unknown fields", header + "foo: 1\nbar: 2\n", []string{`unknown field "bar"`, `unknown field "foo"`}},
		{"string for a number", header + "iptables:\n  masqueradeBit: fourteen\n", []string{"f.conf: iptables.masqueradeBit: cannot unmarshal string"}},
		{"bad duration", header + "conntrack:\n  tcpCloseWaitTimeout: 1x\n", []string{`f.conf: conntrack.tcpCloseWaitTimeout: time: unknown unit "x"`}},
		{"string for a list", header + "nodePortAddresses: 10.0.0.0/8\n", []string{"nodePortAddresses: cannot unmarshal string"}},
		{"bad verbosity", header + "logging:\n  verbosity: loud\n", []string{"logging.verbosity: cannot unmarshal string"}},
		{"field twice", header + "mode: ipvs\nmode: iptables\n", []string{"f.conf", `"mode" already set`}},
		{"other version", "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n", []string{`apiVersion "kubeproxy.config.k8s.io/v1alpha2"`, "want apiVersion kubeproxy.config.k8s.io/v1alpha1"}},
		{"other kind", "apiVersion: v1\nkind: ConfigMap\n", []string{`kind "ConfigMap"`}},
		{"no apiVersion", "kind: KubeProxyConfiguration\nmode: ipvs\n", []string{"f.conf: apiVersion missing"}},
		{"no kind", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nmode: ipvs\n", []string{"f.conf: kind missing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Decode([]byte(tt.doc), "f.conf")
			if err == nil {
				t.Fatalf("Decode = %+v, want an error", cfg)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// Load names the file, and refuses one too large to be a configuration.
func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "config.conf")
	if err := os.WriteFile(bad, []byte(header+"ipvs:\n  strictArp: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad+`: unknown field "ipvs.strictArp"`) {
		t.Errorf("Load(%s) = %v, want the file and the field named", bad, err)
	}
	big := filepath.Join(dir, "big.conf")
	if err := os.WriteFile(big, []byte(header+"#"+strings.Repeat("x", MaxFileBytes)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(%s) = %v, want it refused for its size", big, err)
	}
	if _, err := Load(filepath.Join(dir, "missing.conf")); err == nil || !strings.Contains(err.Error(), "missing.conf") {
		t.Errorf("Load(missing) = %v, want an error naming it", err)
	}
}

// Decode defaults what the file leaves out, as kube-proxy: an empty file
// (the header alone) is kube-proxy's defaults. TestKubeProxyDefaults checks
// every field against the real kube-proxy; this shows a few.
func TestDecodeDefaults(t *testing.T) {
	cfg, err := Decode([]byte(header+"bindAddress: \"::\"\nhealthzBindAddress: \"::1\"\n"), "f.conf")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HealthzBindAddress != "[::1]:10256" || cfg.MetricsBindAddress != "[::1]:10249" {
		t.Errorf("healthz %q metrics %q, want [::1]:10256 (port added) and [::1]:10249 (IPv6 for an IPv6 bindAddress)",
			cfg.HealthzBindAddress, cfg.MetricsBindAddress)
	}
	if cfg.IPTables.SyncPeriod.Duration != 30*time.Second || cfg.IPVS.MinSyncPeriod.Duration != 0 || *cfg.Conntrack.MaxPerCore != 32768 {
		t.Errorf("iptables.syncPeriod %v, ipvs.minSyncPeriod %v, conntrack.maxPerCore %d; want 30s, 0s, 32768",
			cfg.IPTables.SyncPeriod, cfg.IPVS.MinSyncPeriod, *cfg.Conntrack.MaxPerCore)
	}
	if cfg.Mode != "" || cfg.DetectLocalMode != "" {
		t.Errorf("mode %q detectLocalMode %q: Decode must leave them to PlatformDefaults", cfg.Mode, cfg.DetectLocalMode)
	}
}

// The files kubeadm v1.37.2 writes into the kube-proxy ConfigMap, for a
// default cluster and for kind v0.33.0's (testdata/README.md): decoded,
// mapped, and what svcproxy reports it ignores.
func TestGeneratedFiles(t *testing.T) {
	tests := []struct {
		file, mode, clusterCIDR string
		ignored                 []string
	}{
		{"testdata/kubeadm/config.conf", "iptables", "",
			[]string{"iptables.localhostNodePorts", "conntrack.maxPerCore", "conntrack.min", "conntrack.tcpEstablishedTimeout", "conntrack.tcpCloseWaitTimeout", "configSyncPeriod"}},
		{"testdata/kind/config.conf", "iptables", "10.244.0.0/16",
			[]string{"iptables.localhostNodePorts", "conntrack.tcpEstablishedTimeout", "conntrack.tcpCloseWaitTimeout", "configSyncPeriod"}},
		{"testdata/kind/config-nftables.conf", "nftables", "10.244.0.0/16",
			[]string{"conntrack.tcpEstablishedTimeout", "conntrack.tcpCloseWaitTimeout", "conntrack.tcpBeLiberal", "configSyncPeriod"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			cfg, err := Load(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			o, err := Map(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var cidrs []string
			for _, p := range o.ClusterCIDRs {
				cidrs = append(cidrs, p.String())
			}
			if o.Mode != tt.mode || o.ModeDefaulted || strings.Join(cidrs, ",") != tt.clusterCIDR ||
				o.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" || o.HealthzAddr != "0.0.0.0:10256" || o.MetricsAddr != "127.0.0.1:10249" {
				t.Errorf("mode %q (defaulted %v) clusterCIDR %q kubeconfig %q healthz %q metrics %q",
					o.Mode, o.ModeDefaulted, cidrs, o.Kubeconfig, o.HealthzAddr, o.MetricsAddr)
			}
			var ignored []string
			for _, n := range o.Ignored {
				ignored = append(ignored, n.Field)
				t.Logf("ignored %s=%s: %s", n.Field, n.Value, n.Reason)
			}
			if strings.Join(ignored, " ") != strings.Join(tt.ignored, " ") {
				t.Errorf("ignored %q, want %q", ignored, tt.ignored)
			}
		})
	}
}

// kubeadm's file with one field misspelt, as an operator editing the
// ConfigMap might: refused, naming the file and the field.
func TestGeneratedFileTypo(t *testing.T) {
	b, err := os.ReadFile("testdata/kubeadm/config.conf")
	if err != nil {
		t.Fatal(err)
	}
	typo := strings.Replace(string(b), "  strictARP: false", "  strictArp: true", 1)
	if typo == string(b) {
		t.Fatal("testdata/kubeadm/config.conf has no ipvs.strictARP line")
	}
	file := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(file, []byte(typo), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(file)
	if want := file + `: unknown field "ipvs.strictArp"`; err == nil || err.Error() != want {
		t.Errorf("Load = %v, want %q", err, want)
	}
}
