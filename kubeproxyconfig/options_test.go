package kubeproxyconfig

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustMap(t *testing.T, doc string) Options {
	t.Helper()
	cfg, err := Decode([]byte(header+doc), "f.conf")
	if err != nil {
		t.Fatal(err)
	}
	o, err := Map(cfg)
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	return o
}

// mode: "" is iptables, as in kube-proxy 1.37, and says it was defaulted.
func TestMapMode(t *testing.T) {
	tests := []struct {
		doc, mode string
		defaulted bool
	}{
		{"", "iptables", true},
		{`mode: ""`, "iptables", true},
		{"mode: iptables", "iptables", false},
		{"mode: ipvs", "ipvs", false},
		{"mode: nftables", "nftables", false},
		{"mode: hybrid", "hybrid", false},
		{"mode: userspace", "userspace", false},
		{"mode: socklb", "socklb", false},
	}
	for _, tt := range tests {
		o := mustMap(t, tt.doc)
		if o.Mode != tt.mode || o.ModeDefaulted != tt.defaulted {
			t.Errorf("%q: mode %q defaulted %v, want %q %v", tt.doc, o.Mode, o.ModeDefaulted, tt.mode, tt.defaulted)
		}
	}
}

// Each mode reads its own section, as kube-proxy's conversion picks it.
func TestMapSections(t *testing.T) {
	doc := `
iptables: {syncPeriod: 11s, minSyncPeriod: 2s, masqueradeAll: true, masqueradeBit: 12}
ipvs: {syncPeriod: 13s, minSyncPeriod: 3s, scheduler: wlc, strictARP: true}
nftables: {syncPeriod: 17s, minSyncPeriod: 4s, masqueradeBit: 10}
`
	o := mustMap(t, doc)
	want := map[string]Section{
		"iptables":  {11 * time.Second, 2 * time.Second, true, 12},
		"userspace": {11 * time.Second, 2 * time.Second, true, 12},
		"ipvs":      {13 * time.Second, 3 * time.Second, true, 12},
		"nftables":  {17 * time.Second, 4 * time.Second, false, 10},
		"socklb":    {17 * time.Second, 4 * time.Second, false, 10},
	}
	for mode, w := range want {
		if got := o.Section(mode); got != w {
			t.Errorf("Section(%s) = %+v, want %+v", mode, got, w)
		}
	}
	if o.IPVSScheduler != "wlc" || !o.IPVSStrictARP {
		t.Errorf("ipvs scheduler %q strictARP %v", o.IPVSScheduler, o.IPVSStrictARP)
	}
	if o := mustMap(t, ""); o.IPVSScheduler != "rr" {
		t.Errorf("ipvs.scheduler \"\": %q, want rr (kube-proxy's IPVS default)", o.IPVSScheduler)
	}
}

// The fields svcproxy takes from the file.
func TestMapHonoured(t *testing.T) {
	o := mustMap(t, `
hostnameOverride: " Node-A "
bindAddress: 198.19.0.2
healthzBindAddress: 198.19.0.2:10256
metricsBindAddress: 0.0.0.0
bindAddressHardFail: true
enableProfiling: true
clientConnection: {kubeconfig: /var/lib/kube-proxy/kubeconfig.conf, qps: 20, burst: 40}
clusterCIDR: 198.19.0.0/16,2001:db8:19::/64
nodePortAddresses: [primary, 198.19.0.0/24]
portRange: 30000-30100
oomScoreAdj: -500
logging: {format: json, verbosity: 4}
`)
	checks := []struct {
		field     string
		got, want any
	}{
		{"hostnameOverride", o.NodeName, "node-a"},
		{"bindAddress", o.NodeIP, netip.MustParseAddr("198.19.0.2")},
		{"healthzBindAddress", o.HealthzAddr, "198.19.0.2:10256"},
		{"metricsBindAddress", o.MetricsAddr, "0.0.0.0:10249"},
		{"bindAddressHardFail", o.BindAddressHardFail, true},
		{"enableProfiling", o.EnableProfiling, true},
		{"clientConnection.kubeconfig", o.Kubeconfig, "/var/lib/kube-proxy/kubeconfig.conf"},
		{"clientConnection.qps", o.QPS, float32(20)},
		{"clientConnection.burst", o.Burst, 40},
		{"clusterCIDR", o.ClusterCIDRs, []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16"), netip.MustParsePrefix("2001:db8:19::/64")}},
		{"nodePortAddresses", o.NodePortAddresses, []string{"primary", "198.19.0.0/24"}},
		{"portRange", o.ProxyPortRange, "30000-30100"},
		{"oomScoreAdj", o.OOMScoreAdj, -500},
		{"logging.format", o.LogFormat, "json"},
		{"logging.verbosity", o.Verbosity, 4},
	}
	for _, c := range checks {
		if !equal(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.field, c.got, c.want)
		}
	}
	// 0.0.0.0 and :: say "no node IP given", as kube-proxy's bindAddress.
	if o := mustMap(t, "bindAddress: \"::\""); o.NodeIP.IsValid() {
		t.Errorf("bindAddress ::: NodeIP %v, want none", o.NodeIP)
	}
	if o := mustMap(t, "mode: nftables"); !slices.Equal(o.NodePortAddresses, []string{"primary"}) {
		t.Errorf("nftables without nodePortAddresses: %q, want [primary] (platformApplyDefaults)", o.NodePortAddresses)
	}
}

func equal(a, b any) bool {
	switch a := a.(type) {
	case []netip.Prefix:
		return slices.Equal(a, b.([]netip.Prefix))
	case []string:
		return slices.Equal(a, b.([]string))
	}
	return a == b
}

// A value svcproxy cannot use is an error naming the field.
func TestMapRefuses(t *testing.T) {
	tests := []struct{ doc, want string }{
		{"mode: kernelspace", `mode: "kernelspace" is kube-proxy's Windows mode`},
		{"mode: fast", `mode: "fast"`},
		{"bindAddress: node-a", `bindAddress: "node-a": not an IP address`},
		{"healthzBindAddress: localhost:10256", `healthzBindAddress: "localhost:10256"`},
		{"metricsBindAddress: 127.0.0.1:99999", `metricsBindAddress: "127.0.0.1:99999": port`},
		{"iptables: {masqueradeBit: 32}", "iptables.masqueradeBit: 32: must be within [0, 31]"},
		{"nftables: {masqueradeBit: 0}", "nftables.masqueradeBit: 0: svcproxy's rules cannot mark with bit 0"},
		{"iptables: {syncPeriod: 1s, minSyncPeriod: 2s}", "iptables.syncPeriod: 1s: must be at least iptables.minSyncPeriod (2s)"},
		{"mode: ipvs\nipvs: {syncPeriod: -1s}", "ipvs.syncPeriod: -1s: must be greater than 0"},
		{"ipvs: {scheduler: mh}", `ipvs.scheduler: "mh"`},
		{"clusterCIDR: 10.244.0.0/16,10.245.0.0/16", "clusterCIDR: \"10.244.0.0/16,10.245.0.0/16\": at most one CIDR per IP family"},
		{"clusterCIDR: 10.244.0.0", `clusterCIDR: "10.244.0.0": "10.244.0.0" is not a CIDR`},
		{"nodePortAddresses: [all, everywhere]", `nodePortAddresses[1]: "everywhere"`},
		{"oomScoreAdj: -1001", "oomScoreAdj: -1001: must be within [-1000, 1000]"},
		{"detectLocalMode: Magic", `detectLocalMode: "Magic"`},
		{"logging: {format: xml}", `logging.format: "xml": want text or json`},
		{"clientConnection: {qps: -1}", "clientConnection.qps: -1"},
	}
	for _, tt := range tests {
		cfg, err := Decode([]byte(header+tt.doc), "f.conf")
		if err != nil {
			t.Fatalf("%q: %v", tt.doc, err)
		}
		_, err = Map(cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: Map error %v, want %q", tt.doc, err, tt.want)
		}
	}
}

// Every field svcproxy ignores is reported when the file asks for something
// with it, and only then. testdata/everything.yaml sets every field of the
// type; at kube-proxy's defaults only what kube-proxy would act on remains.
func TestMapIgnored(t *testing.T) {
	cfg, err := Load("testdata/everything.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o, err := Map(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range o.Ignored {
		if n.Reason == "" || n.Value == "" {
			t.Errorf("%s: value %q reason %q: both must be said", n.Field, n.Value, n.Reason)
		}
		got = append(got, n.Field)
	}
	var want []string
	for _, f := range Fields {
		if f.Use != Honoured {
			want = append(want, f.Path)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ignored fields reported for everything.yaml:\n%q\nwant every field Fields marks ignored:\n%q", got, want)
	}

	o = mustMap(t, "mode: nftables\nconntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}\nconfigSyncPeriod: 15m")
	var left []string
	for _, n := range o.Ignored {
		left = append(left, n.Field)
	}
	if !slices.Equal(left, []string{"configSyncPeriod"}) {
		t.Errorf("defaults with conntrack left alone: ignored %q, want only configSyncPeriod", left)
	}
}
