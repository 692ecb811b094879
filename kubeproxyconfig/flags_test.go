package kubeproxyconfig

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/kube-proxy/config/v1alpha1"
)

// complete parses args as kube-proxy's command line and completes it.
func complete(t *testing.T, args ...string) (*v1alpha1.KubeProxyConfiguration, []string) {
	t.Helper()
	fs := flag.NewFlagSet("kube-proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	cfg, ignored, err := f.Complete()
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return cfg, ignored
}

// Beside --config, the file wins over every flag that sets one of its
// fields, but --hostname-override and the logging flags win over the file
// (kube-proxy's Options.Complete); the flags the file overrode are named.
func TestFlagsBesideConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.conf")
	doc := header + "mode: ipvs\nhostnameOverride: from-file\nclusterCIDR: 10.244.0.0/16\nlogging: {verbosity: 2, vmodule: [{filePattern: a, verbosity: 1}]}\n"
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, ignored := complete(t, "--config="+file, "--proxy-mode=nftables", "--cluster-cidr=10.0.0.0/8",
		"--hostname-override=Node-A", "--v=5", "--vmodule=b=3", "--masquerade-all", "--healthz-port=0")
	if cfg.Mode != "ipvs" || cfg.ClusterCIDR != "10.244.0.0/16" || cfg.IPTables.MasqueradeAll || cfg.HealthzBindAddress != "0.0.0.0:10256" {
		t.Errorf("mode %q clusterCIDR %q masqueradeAll %v healthz %q: want the file's (ipvs, 10.244.0.0/16, false, 0.0.0.0:10256)",
			cfg.Mode, cfg.ClusterCIDR, cfg.IPTables.MasqueradeAll, cfg.HealthzBindAddress)
	}
	if cfg.HostnameOverride != "node-a" || cfg.Logging.Verbosity != 5 {
		t.Errorf("hostnameOverride %q verbosity %d: want the flags' (node-a, 5)", cfg.HostnameOverride, cfg.Logging.Verbosity)
	}
	if len(cfg.Logging.VModule) != 2 || cfg.Logging.VModule[0].FilePattern != "b" || cfg.Logging.VModule[1].FilePattern != "a" {
		t.Errorf("vmodule %v: want the flag's b=3, then the file's a=1", cfg.Logging.VModule)
	}
	want := []string{"--cluster-cidr", "--healthz-port", "--masquerade-all", "--proxy-mode"}
	if !slices.Equal(ignored, want) {
		t.Errorf("ignored flags %q, want %q", ignored, want)
	}
}

// Without --config the flags make the configuration, on kube-proxy's
// defaults.
func TestFlagsAlone(t *testing.T) {
	cfg, ignored := complete(t, "--proxy-mode=ipvs", "--ipvs-sync-period=10s", "--iptables-sync-period=5s",
		"--cluster-cidr=10.244.0.0/16", "--masquerade-all", "--nodeport-addresses=10.0.0.0/8", "--nodeport-addresses=primary",
		"--metrics-port=0", "--ipvs-scheduler=wlc", "--feature-gates=A=true,B=false")
	if len(ignored) != 0 {
		t.Errorf("ignored %q without --config", ignored)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"mode", cfg.Mode, v1alpha1.ProxyMode("ipvs")},
		{"ipvs.syncPeriod", cfg.IPVS.SyncPeriod.Duration, 10 * time.Second},
		// kube-proxy's internal configuration took it from iptables' defaults.
		{"ipvs.minSyncPeriod", cfg.IPVS.MinSyncPeriod.Duration, time.Second},
		// --iptables-sync-period is not ipvs mode's.
		{"iptables.syncPeriod", cfg.IPTables.SyncPeriod.Duration, 30 * time.Second},
		{"clusterCIDR", cfg.ClusterCIDR, "10.244.0.0/16"},
		{"iptables.masqueradeAll", cfg.IPTables.MasqueradeAll, true},
		{"metricsBindAddress", cfg.MetricsBindAddress, ""},
		{"healthzBindAddress", cfg.HealthzBindAddress, "0.0.0.0:10256"},
		{"ipvs.scheduler", cfg.IPVS.Scheduler, "wlc"},
		{"featureGates", len(cfg.FeatureGates), 2},
		{"detectLocalMode", cfg.DetectLocalMode, v1alpha1.LocalMode("ClusterCIDR")},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if !slices.Equal(cfg.NodePortAddresses, []string{"10.0.0.0/8", "primary"}) {
		t.Errorf("nodePortAddresses %q: want both uses of the flag", cfg.NodePortAddresses)
	}
	cfg, _ = complete(t, "--proxy-mode=nftables", "--iptables-min-sync-period=3s", "--masquerade-all")
	if cfg.NFTables.MinSyncPeriod.Duration != 3*time.Second || !cfg.NFTables.MasqueradeAll || cfg.IPTables.MasqueradeAll {
		t.Errorf("nftables: minSyncPeriod %v masqueradeAll %v (iptables' %v): want the flags in the nftables section",
			cfg.NFTables.MinSyncPeriod, cfg.NFTables.MasqueradeAll, cfg.IPTables.MasqueradeAll)
	}
	if !slices.Equal(cfg.NodePortAddresses, []string{"primary"}) {
		t.Errorf("nftables without --nodeport-addresses: %q, want [primary]", cfg.NodePortAddresses)
	}
}

func TestFlagsRefuse(t *testing.T) {
	for _, args := range [][]string{
		{"--hostname-override= "},
		{"--config=/nonexistent/config.conf"},
	} {
		fs := flag.NewFlagSet("kube-proxy", flag.ContinueOnError)
		f := AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.Complete(); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// svcproxy's own modes read the section of their kernel path: the flags
// reach all three.
func TestFlagsSvcproxyModes(t *testing.T) {
	cfg, _ := complete(t, "--proxy-mode=hybrid", "--iptables-sync-period=7s", "--iptables-min-sync-period=2s", "--masquerade-all")
	o, err := Map(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, kernel := range []string{"iptables", "ipvs", "nftables", "socklb"} {
		if s := o.Section(kernel); s.SyncPeriod != 7*time.Second || s.MinSyncPeriod != 2*time.Second || !s.MasqueradeAll {
			t.Errorf("hybrid over %s: %+v, want 7s, 2s, masquerade all", kernel, s)
		}
	}
}

// kube-proxy's command line as pflag and component-base read it: an
// underscore in a flag's name is a dash, -v4 is -v=4, and values are left
// alone, also one that looks like a flag.
func TestNormalizeArgs(t *testing.T) {
	fs := flag.NewFlagSet("kube-proxy", flag.ContinueOnError)
	f := AddFlags(fs)
	args := []string{"--hostname_override=Node-A", "-v4", "--config", "/var/lib/kube_proxy/config.conf",
		"--oom-score-adj", "-998", "--masquerade_all", "--cleanup", "--", "--x_y"}
	got := NormalizeArgs(fs, args)
	want := []string{"--hostname-override=Node-A", "-v=4", "--config", "/var/lib/kube_proxy/config.conf",
		"--oom-score-adj", "-998", "--masquerade-all", "--cleanup", "--", "--x_y"}
	if !slices.Equal(got, want) {
		t.Fatalf("NormalizeArgs(%q):\n%q, want\n%q", args, got, want)
	}
	if err := fs.Parse(got[:len(got)-2]); err != nil {
		t.Fatal(err)
	}
	if f.hostnameOverride != "Node-A" || f.cfg.Logging.Verbosity != 4 || f.ConfigFile != "/var/lib/kube_proxy/config.conf" || *f.cfg.OOMScoreAdj != -998 || !f.masqueradeAll {
		t.Errorf("parsed: hostname %q v %d config %q oom %d masqueradeAll %v", f.hostnameOverride, f.cfg.Logging.Verbosity, f.ConfigFile, *f.cfg.OOMScoreAdj, f.masqueradeAll)
	}
}
