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
