package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// docs splits a multi-document YAML file and decodes each document.
func docs(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, d := range strings.Split(s, "\n---\n") {
		var m map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(d), &m), d)
		out = append(out, m)
	}
	return out
}

// get walks a decoded document: get(m, "nodeRegistration", "name").
func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func testKubeadmCluster() (kubeadmCluster, []*Node) {
	p := topology.DefaultPlan()
	nodes := kubeadmNodes(p, "/run/svclab", topology.CgroupRoot, 3)
	return kubeadmCluster{
		Endpoint: nodes[0].Addr, ServiceSubnet: p.ServiceCIDR, PodSubnet: kubeadmPodSubnet, NodeMask: kubeadmNodeMask,
		Token: "abcdef.0123456789abcdef", CAHash: "sha256:00", ProxyMode: "iptables",
	}, nodes
}

// TestInitConfig checks the control-plane node's kubeadm configuration:
// its documents and kinds, and what these machines need of each.
func TestInitConfig(t *testing.T) {
	kc, nodes := testKubeadmCluster()
	d := docs(t, nodes[0].initConfig(kc))
	require.Len(t, d, 4)
	for i, kind := range []string{"InitConfiguration", "ClusterConfiguration", "KubeletConfiguration", "KubeProxyConfiguration"} {
		require.Equal(t, kind, d[i]["kind"])
	}
	init, cc, kubelet, proxy := d[0], d[1], d[2], d[3]
	require.Equal(t, "kubeadm.k8s.io/v1beta4", init["apiVersion"])
	require.Equal(t, "198.19.0.1", get(init, "localAPIEndpoint", "advertiseAddress"))
	require.Equal(t, "node", get(init, "nodeRegistration", "name"))
	require.Equal(t, "Never", get(init, "nodeRegistration", "imagePullPolicy"))
	require.Equal(t, "unix:///run/containerd/containerd.sock", get(init, "nodeRegistration", "criSocket"))
	require.Equal(t, []any{map[string]any{"name": "node-ip", "value": "198.19.0.1"}}, get(init, "nodeRegistration", "kubeletExtraArgs"))
	require.Equal(t, "/run/svclab/node/patches", get(init, "patches", "directory"))
	require.Equal(t, "abcdef.0123456789abcdef", get(init, "bootstrapTokens").([]any)[0].(map[string]any)["token"])

	require.Equal(t, KubernetesVersion, cc["kubernetesVersion"])
	require.Equal(t, "198.19.0.1:6443", cc["controlPlaneEndpoint"])
	require.Equal(t, "198.18.0.0/16", get(cc, "networking", "serviceSubnet"))
	require.Equal(t, "198.19.64.0/18", get(cc, "networking", "podSubnet"))
	require.Contains(t, get(cc, "apiServer", "extraArgs"), map[string]any{"name": "kubelet-preferred-address-types", "value": "InternalIP"})
	require.Contains(t, get(cc, "controllerManager", "extraArgs"), map[string]any{"name": "node-cidr-mask-size-ipv4", "value": "24"})

	require.Equal(t, false, kubelet["failCgroupV1"])
	require.Equal(t, "cgroupfs", kubelet["cgroupDriver"])
	require.Equal(t, true, kubelet["protectKernelDefaults"])

	require.Equal(t, "iptables", proxy["mode"])
	require.Equal(t, float64(0), get(proxy, "conntrack", "maxPerCore"))
}

// TestJoinConfig checks a worker's: where it joins, with what it checks the
// API server, and its own registration.
func TestJoinConfig(t *testing.T) {
	kc, nodes := testKubeadmCluster()
	d := docs(t, nodes[2].joinConfig(kc))
	require.Len(t, d, 1)
	join := d[0]
	require.Equal(t, "JoinConfiguration", join["kind"])
	require.Equal(t, "198.19.0.1:6443", get(join, "discovery", "bootstrapToken", "apiServerEndpoint"))
	require.Equal(t, []any{"sha256:00"}, get(join, "discovery", "bootstrapToken", "caCertHashes"))
	require.Equal(t, "worker2", get(join, "nodeRegistration", "name"))
	require.Equal(t, []any{map[string]any{"name": "node-ip", "value": "198.19.0.3"}}, get(join, "nodeRegistration", "kubeletExtraArgs"))
	require.Equal(t, "/run/svclab/worker2/patches", get(join, "patches", "directory"))
}

// TestKubeletPatch checks each node's cgroup root is its own, under the
// lab's.
func TestKubeletPatch(t *testing.T) {
	_, nodes := testKubeadmCluster()
	seen := map[any]bool{}
	for _, n := range nodes {
		d := docs(t, n.kubeletPatch())
		root := d[0]["cgroupRoot"]
		require.Equal(t, "/svclab/"+n.Name, root)
		require.False(t, seen[root], "two nodes share cgroup root %v", root)
		seen[root] = true
	}
}

func TestKubeletArgs(t *testing.T) {
	args, err := kubeletArgs(`KUBELET_KUBEADM_ARGS="--hostname-override=worker1 --node-ip=198.19.0.2"` + "\n")
	require.NoError(t, err)
	require.Equal(t, []string{
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
		"--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml",
		"--hostname-override=worker1", "--node-ip=198.19.0.2",
	}, args)
	_, err = kubeletArgs("OTHER=1\n")
	require.Error(t, err)
}

func TestBootstrapToken(t *testing.T) {
	tok, err := newBootstrapToken()
	require.NoError(t, err)
	// kubeadm's BootstrapTokenPattern.
	require.Regexp(t, regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`), tok)
}

// TestCACertHash checks the hash is kubeadm's: SHA-256 of the certificate's
// SubjectPublicKeyInfo, which is the DER of its public key.
func TestCACertHash(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	require.NoError(t, err)
	sum := sha256.Sum256(spki)
	got, err := caCertHash(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	require.NoError(t, err)
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), got)
	_, err = caCertHash([]byte("not a certificate"))
	require.Error(t, err)
}
