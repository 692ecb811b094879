package cluster

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestModeLine edits the mode of kube-proxy's config.conf as kubeadm wrote
// it (deploy/kubeadm holds kubeadm's own print of it), and nothing else.
func TestModeLine(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubeadm/kube-proxy.yaml")
	require.NoError(t, err)
	var conf string
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var cm struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &cm))
		if cm.Kind == "ConfigMap" {
			conf = cm.Data["config.conf"]
		}
	}
	require.NotEmpty(t, conf, "no ConfigMap with config.conf in deploy/kubeadm/kube-proxy.yaml")
	require.True(t, modeLine.MatchString(conf))
	edited := modeLine.ReplaceAllString(conf, "mode: nftables")
	var before, after map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(conf), &before))
	require.NoError(t, yaml.Unmarshal([]byte(edited), &after))
	require.Equal(t, "iptables", before["mode"])
	require.Equal(t, "nftables", after["mode"])
	delete(before, "mode")
	delete(after, "mode")
	require.Equal(t, before, after, "only the mode changes")
}

func TestWhich(t *testing.T) {
	require.Equal(t, "svcproxy", which(proxyImages, "svcproxy.test/svcproxy:dev"))
	require.Equal(t, "kube-proxy", which(proxyImages, "registry.k8s.io/kube-proxy:v1.37.2"))
	require.Equal(t, "coredns", which(dnsImages, "registry.k8s.io/coredns/coredns:v1.14.6"))
	require.Equal(t, "", which(dnsImages, "example.test/other:1"))
}

// TestModeChangeSays: `svclab mode`'s line on the kubeadm cluster says
// what was done: the pods deleted when only the ConfigMap changed; when
// the pod template changed too (socklb's volumes and flags added, or taken
// away once socklb's pins were removed), the DaemonSet's own rolling
// update, and nothing deleted.
func TestModeChangeSays(t *testing.T) {
	for _, tc := range []struct {
		change ModeChange
		want   string
	}{
		{ModeChange{Proxy: "kube-proxy", Mode: "nftables"},
			"kube-proxy runs in nftables mode on every node (configmap kube-system/kube-proxy's mode edited; its pods deleted, and made anew by daemonset kube-system/kube-proxy)"},
		{ModeChange{Proxy: "svcproxy", Mode: "socklb", SocketLB: "added"},
			"svcproxy runs in socklb mode on every node (configmap kube-system/kube-proxy's mode edited; daemonset kube-system/kube-proxy's pod template given the node's cgroup2 hierarchy and bpffs, --socklb-cgroup and --socklb-pin-path; the DaemonSet replaced its pods, one node at a time: none deleted)"},
		{ModeChange{Proxy: "svcproxy", Mode: "iptables", SocketLB: "removed", PinsRemoved: true},
			"svcproxy runs in iptables mode on every node (configmap kube-system/kube-proxy's mode edited; socklb's pins removed in every node (svcproxy --cleanup --socklb-pin-path); daemonset kube-system/kube-proxy's pod template back to kubeadm's; the DaemonSet replaced its pods, one node at a time: none deleted)"},
	} {
		require.Equal(t, tc.want, tc.change.String())
	}
	// What setKubeadmMode did, by whether the DaemonSet had socklb's
	// volumes before and whether its pod template changed.
	for _, tc := range []struct {
		mode        string
		had, rolled bool
		want        ModeChange
	}{
		{"nftables", false, false, ModeChange{Proxy: "svcproxy", Mode: "nftables"}},
		{"socklb", false, true, ModeChange{Proxy: "svcproxy", Mode: "socklb", SocketLB: "added"}},
		{"socklb", true, false, ModeChange{Proxy: "svcproxy", Mode: "socklb"}}, // socklb again: the pods deleted
		{"iptables", true, true, ModeChange{Proxy: "svcproxy", Mode: "iptables", SocketLB: "removed", PinsRemoved: true}},
	} {
		require.Equal(t, tc.want, modeChange("svcproxy", tc.mode, tc.had, tc.rolled), "%s had %v rolled %v", tc.mode, tc.had, tc.rolled)
	}
}
