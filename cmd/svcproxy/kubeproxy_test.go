package main

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/kubeproxyconfig"
)

// kubeadm's DaemonSet runs --config=FILE --hostname-override=NAME: the file
// (here kind's, as kubeadm writes it) is the configuration; beside it
// --hostname-override and the logging flags win, the flags that set one of
// its fields (svcproxy's --mode among them) are ignored and named, and
// svcproxy's own options apply.
func TestParseFlagsKubeProxyConfig(t *testing.T) {
	file := "../../kubeproxyconfig/testdata/kind/config.conf"
	cfg, err := parseFlags([]string{"--config=" + file, "--hostname-override=Kind-Worker",
		"--mode=userspace", "--proxy-mode=ipvs", "--offload=iptables", "--promote-after=1s", "--v=4", "--udp-max-sessions=7"})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"mode (the file's)", cfg.Mode, "iptables"},
		{"mode defaulted", cfg.ModeDefaulted, false},
		{"node name (the flag's)", cfg.NodeName, "kind-worker"},
		{"kubeconfig", cfg.Kubeconfig, "/var/lib/kube-proxy/kubeconfig.conf"},
		{"cluster CIDRs", len(cfg.ClusterCIDRs), 1},
		{"sync period", cfg.SyncPeriod, 30 * time.Second},
		{"min sync period (kind's)", cfg.MinSyncPeriod, time.Second},
		{"healthz", cfg.HealthzAddr, "0.0.0.0:10256"},
		{"metrics", cfg.MetricsAddr, "127.0.0.1:10249"},
		{"hard fail (kube-proxy's default)", cfg.BindAddressHardFail, false},
		{"OOM score", *cfg.OOMScoreAdj, -999},
		{"verbosity (the flag's)", cfg.Verbosity, 4},
		{"offload (svcproxy's own)", cfg.Offload, "iptables"},
		{"promote-after (svcproxy's own)", cfg.PromoteAfter, time.Second},
		{"udp-max-sessions (svcproxy's own)", cfg.UDPMaxSessions, 7},
		{"IPVS scheduler", cfg.IPVSScheduler, "rr"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if cfg.ClusterCIDRs[0] != netip.MustParsePrefix("10.244.0.0/16") {
		t.Errorf("cluster CIDRs %v, want kind's 10.244.0.0/16", cfg.ClusterCIDRs)
	}
	if want := []string{"--mode", "--proxy-mode"}; !slices.Equal(cfg.IgnoredFlags, want) {
		t.Errorf("ignored flags %q, want %q", cfg.IgnoredFlags, want)
	}
	if len(cfg.Ignored) == 0 {
		t.Error("no ignored field reported for kind's file (its conntrack timeouts, at least)")
	}
	if cfg.KubeProxy == nil || cfg.KubeProxy.HostnameOverride != "kind-worker" {
		t.Errorf("the configuration in force (/configz) does not carry the flag's hostname: %+v", cfg.KubeProxy)
	}

	// A file that does not decode stops svcproxy, naming file and field.
	bad := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(bad, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmdoe: ipvs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseFlags([]string{"--config", bad}); err == nil || !strings.Contains(err.Error(), bad+`: unknown field "mdoe"`) {
		t.Errorf("--config with a misspelt field: %v", err)
	}
	// A value svcproxy cannot use, too.
	if err := os.WriteFile(bad, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nipvs: {scheduler: mh}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseFlags([]string{"--config", bad}); err == nil || !strings.Contains(err.Error(), bad+`: ipvs.scheduler: "mh"`) {
		t.Errorf("--config with ipvs.scheduler mh: %v", err)
	}
}

// kube-proxy's command line as component-base's pflag reads it: an
// underscore in a flag's name is a dash, -v4 is -v=4.
func TestParseFlagsKubeProxySpelling(t *testing.T) {
	cfg, err := parseFlags([]string{"--config=../../kubeproxyconfig/testdata/kubeadm/config.conf", "--hostname_override=Node-A", "-v4", "--udp_max_sessions", "9"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "node-a" || cfg.Verbosity != 4 || cfg.UDPMaxSessions != 9 {
		t.Errorf("node name %q verbosity %d udp-max-sessions %d, want node-a, 4, 9", cfg.NodeName, cfg.Verbosity, cfg.UDPMaxSessions)
	}
}

// Without --config, kube-proxy's flags say what svcproxy's would, and
// svcproxy's defaults stand where nothing is given.
func TestParseFlagsKubeProxyFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--services", "x.yaml", "--proxy-mode=nftables", "--iptables-sync-period=7s", "--masquerade-all", "--cluster-cidr=10.244.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != "nftables" || cfg.ModeDefaulted || cfg.SyncPeriod != 7*time.Second || !cfg.MasqueradeAll || cfg.ClusterCIDRs[0] != netip.MustParsePrefix("10.244.0.0/16") {
		t.Errorf("mode %q (defaulted %v) sync %v masqueradeAll %v CIDRs %v", cfg.Mode, cfg.ModeDefaulted, cfg.SyncPeriod, cfg.MasqueradeAll, cfg.ClusterCIDRs)
	}
	cfg, err = parseFlags([]string{"--services", "x.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != "hybrid" || !cfg.ModeDefaulted || len(cfg.ClusterCIDRs) != 2 || !cfg.BindAddressHardFail || cfg.OOMScoreAdj != nil {
		t.Errorf("no flags: mode %q (defaulted %v) CIDRs %v hard fail %v OOM %v: want svcproxy's defaults",
			cfg.Mode, cfg.ModeDefaulted, cfg.ClusterCIDRs, cfg.BindAddressHardFail, cfg.OOMScoreAdj)
	}
	if _, err := parseFlags([]string{"--mode=iptables", "--proxy-mode=ipvs"}); err == nil {
		t.Error("--mode and --proxy-mode disagreeing: no error")
	}
}

// writeKubeProxyConfig writes a KubeProxyConfiguration of body for the
// helper svcproxy: on a manifests file (--services beside it), so without a
// kubeconfig.
func writeKubeProxyConfig(t *testing.T, body string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "config.conf")
	doc := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" + body
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestKubeProxyConfigRun starts svcproxy with kube-proxy's file whose mode is
// empty: it runs iptables mode with kube-proxy's warning, logs each field it
// ignores and the flags the file overrode, and serves /configz, /proxyMode
// and /healthz on the addresses the file names (its defaults).
func TestKubeProxyConfigRun(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save")
	ns := netnstest.New(t)
	file := writeKubeProxyConfig(t, "clusterCIDR: 198.19.0.0/16\nconntrack: {maxPerCore: 0, tcpBeLiberal: true}\n")
	lines := startHelper(t, ns, "--config", file, "--hostname-override", "node-a")
	var defaulted, ignored, flags int
	for _, l := range lines {
		switch {
		case strings.Contains(l, kubeproxyconfig.DefaultedModeWarning) && strings.Contains(l, "level=WARN"):
			defaulted++
		case strings.Contains(l, "KubeProxyConfiguration field ignored"):
			ignored++
			if strings.Contains(l, "field=conntrack.tcpBeLiberal") && !strings.Contains(l, "reason=") {
				t.Errorf("ignored line without its reason: %s", l)
			}
		case strings.Contains(l, "flags ignored"):
			flags++
			// startHelper's own --healthz-bind-address and --metrics-bind-address.
			if !strings.Contains(l, "--healthz-bind-address --metrics-bind-address") {
				t.Errorf("flags line does not name the flags the file overrode: %s", l)
			}
		}
	}
	// tcpBeLiberal, tcpEstablishedTimeout, tcpCloseWaitTimeout,
	// iptables.localhostNodePorts, configSyncPeriod.
	if defaulted != 1 || ignored != 5 || flags != 1 {
		t.Errorf("kube-proxy's defaulted-mode warning %d times (want 1), ignored fields %d (want 5), ignored-flags lines %d (want 1)", defaulted, ignored, flags)
	}
	if mode, err := getIn(ns, "127.0.0.1:10249", "/proxyMode"); err != nil || strings.TrimSpace(mode) != "iptables" {
		t.Errorf("/proxyMode = %q, %v; want iptables", mode, err)
	}
	body, err := getIn(ns, "127.0.0.1:10249", "/configz")
	if err != nil {
		t.Fatal(err)
	}
	var configz map[string]struct {
		Mode             string `json:"mode"`
		HostnameOverride string `json:"hostnameOverride"`
		ClusterCIDR      string `json:"clusterCIDR"`
		Kind             string `json:"kind"`
	}
	if err := json.Unmarshal([]byte(body), &configz); err != nil {
		t.Fatalf("/configz: %v\n%s", err, body)
	}
	c := configz["kubeproxy.config.k8s.io"]
	if c.Mode != "iptables" || c.HostnameOverride != "node-a" || c.ClusterCIDR != "198.19.0.0/16" || c.Kind != "KubeProxyConfiguration" {
		t.Errorf("/configz: %+v, want mode iptables (defaulted), hostnameOverride node-a (the flag), clusterCIDR 198.19.0.0/16", c)
	}
	// /healthz, on the file's default healthzBindAddress (0.0.0.0:10256),
	// answers 200 once the first sync is done.
	waitHealthy(t, ns)
}

// The servers listen where kube-proxy's file says, not where the flags
// beside it say: an address without a port gets kube-proxy's (10256).
func TestKubeProxyConfigAddresses(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save")
	ns := netnstest.New(t)
	file := writeKubeProxyConfig(t, "mode: iptables\nhealthzBindAddress: 127.0.0.2\nmetricsBindAddress: 127.0.0.3:10250\n")
	startHelper(t, ns, "--config", file)
	for _, get := range []struct{ addr, path, want string }{
		{"127.0.0.2:10256", "/livez", ""},
		{"127.0.0.3:10250", "/metrics", "svcproxy_healthy"},
		{"127.0.0.3:10250", "/configz", `"healthzBindAddress":"127.0.0.2:10256"`},
		{"127.0.0.3:10250", "/proxyMode", "iptables"},
	} {
		body, err := getIn(ns, get.addr, get.path)
		if err != nil || !strings.Contains(body, get.want) {
			t.Errorf("GET %s%s: %v, want a body with %q:\n%.300s", get.addr, get.path, err, get.want, body)
		}
	}
	// /healthz, once the first sync is done.
	deadline := time.Now().Add(30 * time.Second)
	for _, err := getIn(ns, "127.0.0.2:10256", "/healthz"); err != nil; _, err = getIn(ns, "127.0.0.2:10256", "/healthz") {
		if time.Now().After(deadline) {
			t.Fatalf("GET 127.0.0.2:10256/healthz: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The flags startHelper gives beside --config are ignored.
	if _, err := getIn(ns, "127.0.0.1:10249", "/metrics"); err == nil {
		t.Error("something serves 127.0.0.1:10249, the ignored --metrics-bind-address")
	}
}

// mode: ipvs in kube-proxy's file, on a kernel without IPVS: kube-proxy's
// deprecation warning, then the fallback to iptables, saying why.
func TestKubeProxyConfigIPVSFallback(t *testing.T) {
	if err := kipvs.Available(); err == nil {
		t.Skip("this kernel has IPVS: nothing to fall back from (test/vm covers IPVS mode)")
	}
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save")
	ns := netnstest.New(t)
	file := writeKubeProxyConfig(t, "mode: ipvs\nipvs: {scheduler: wlc}\n")
	var fallback, deprecated int
	for _, l := range startHelper(t, ns, "--config", file) {
		switch {
		case strings.Contains(l, "IPVS not available, running iptables mode instead") && strings.Contains(l, "kernel has no IPVS"):
			fallback++
		case strings.Contains(l, ipvsDeprecation):
			deprecated++
		}
	}
	if fallback != 1 || deprecated != 1 {
		t.Errorf("fallback lines %d, deprecation warnings %d: want one each", fallback, deprecated)
	}
	if mode, err := getIn(ns, "127.0.0.1:10249", "/proxyMode"); err != nil || strings.TrimSpace(mode) != "iptables" {
		t.Errorf("/proxyMode = %q, %v; want iptables", mode, err)
	}
}

// The mode switched as a course does it: kube-proxy's file says iptables,
// the pod is deleted, the file now says nftables, a new pod starts. The new
// svcproxy says its mode in its log and on /proxyMode, and removed what
// iptables mode left (kube-proxy's platformCleanup); switched back, the
// nftables table goes.
func TestKubeProxyConfigModeSwitch(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save", "nft")
	if err := knft.Available(); err != nil {
		t.Skipf("nftables: %v", err)
	}
	ns := netnstest.New(t)
	// nftables mode serves NodePorts on the node's primary address
	// (nodePortAddresses' default there): the node has one.
	// (This kernel has no dummy links: a veth pair.)
	ns.Run(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	ns.Run(t, "ip", "link", "set", "eth1", "up")
	ns.Run(t, "ip", "link", "set", "eth0", "up")
	ns.AddAddr(t, "eth0", netip.MustParsePrefix("198.19.0.2/24"))
	svcpChains := func() bool { return strings.Contains(ns.Run(t, "iptables-save", "-t", "nat"), ":SVCP-") }
	nftTable := func() bool { return strings.Contains(ns.Run(t, "nft", "list", "tables"), "svcproxy") }
	run := func(mode string) {
		t.Helper()
		file := writeKubeProxyConfig(t, "mode: "+mode+"\nclusterCIDR: 198.19.0.0/16\n")
		lines, stop := startHelperStop(t, ns, "--config", file, "--hostname-override", "node-a")
		defer stop()
		started := false
		for _, l := range lines {
			started = started || strings.Contains(l, `msg="svcproxy starting" mode=`+mode)
		}
		if !started {
			t.Errorf("%s: the log does not say the mode it starts in", mode)
		}
		waitHealthy(t, ns)
		if got, err := getIn(ns, "127.0.0.1:10249", "/proxyMode"); err != nil || strings.TrimSpace(got) != mode {
			t.Errorf("/proxyMode = %q, %v; want %s", got, err, mode)
		}
	}
	run("iptables")
	if !svcpChains() {
		t.Fatal("iptables mode left no SVCP- chains to switch away from")
	}
	run("nftables")
	if svcpChains() {
		t.Error("switched to nftables: iptables mode's SVCP- chains are still there")
	}
	if !nftTable() {
		t.Fatal("nftables mode left no svcproxy table")
	}
	run("iptables")
	if nftTable() {
		t.Error("switched back to iptables: nftables mode's table is still there")
	}
}

// A write to the --config file ends svcproxy, as it ends kube-proxy
// (Options.eventHandler): exit status 1, kube-proxy's words in the log, and
// the next start reads the new file.
func TestKubeProxyConfigFileWritten(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save")
	ns := netnstest.New(t)
	file := writeKubeProxyConfig(t, "mode: iptables\nclusterCIDR: 198.19.0.0/16\n")
	lines, _, exited := startHelperProcess(t, ns, "--config", file, "--hostname-override", "node-a")
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, `msg="Using iptables Proxier"`) }) {
		t.Errorf("the log lacks kube-proxy's line for its mode, Using iptables Proxier")
	}
	waitHealthy(t, ns)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(string(b), "mode: iptables", "mode: nftables", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	rest, err := exited()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("svcproxy after its file was written: %v, want exit status 1", err)
	}
	log := strings.Join(rest, "\n")
	if !strings.Contains(log, kubeproxyconfig.ErrFileUpdated.Error()) {
		t.Errorf("the log after the write lacks %q:\n%s", kubeproxyconfig.ErrFileUpdated, log)
	}
}

// --write-config-to writes the configuration in force, which kube-proxy's
// decoder reads back as it is: kind's file with the flag's hostname.
func TestWriteConfigTo(t *testing.T) {
	out := filepath.Join(t.TempDir(), "written.yaml")
	cfg, err := parseFlags([]string{"--config=../../kubeproxyconfig/testdata/kind/config.conf", "--hostname-override=kind-worker", "--write-config-to=" + out})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeConfig(cfg); err != nil {
		t.Fatal(err)
	}
	back, err := kubeproxyconfig.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.HostnameOverride != "kind-worker" || back.ClusterCIDR != "10.244.0.0/16" || back.Mode != "iptables" {
		t.Errorf("written: hostnameOverride %q clusterCIDR %q mode %q", back.HostnameOverride, back.ClusterCIDR, back.Mode)
	}
	if !strings.Contains(version(), "svcproxy") {
		t.Errorf("--version: %q", version())
	}
}
