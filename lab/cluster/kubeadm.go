package cluster

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// The kubeadm cluster (`svclab up --nodes N`): kubeadm v1.37.2 makes it
// from the configuration rendered here, one file per node, as an operator
// writes them. Every setting that is not kubeadm's default says why it is
// there; docs/kubeadm.md lists them.

// KubernetesVersion is the version of every Kubernetes program the lab
// runs, kubeadm's kubernetesVersion.
const KubernetesVersion = "v1.37.2"

// kubeadmCluster is what every node's kubeadm configuration shares.
type kubeadmCluster struct {
	// Endpoint is the control-plane node's address: kube-apiserver's
	// advertise address, and where the workers join.
	Endpoint netip.Addr
	// ServiceSubnet and PodSubnet are kubeadm's networking ranges; every
	// node gets a /NodeMask of PodSubnet from kube-controller-manager.
	ServiceSubnet, PodSubnet netip.Prefix
	NodeMask                 int
	// Token is the bootstrap token the workers join with.
	Token string
	// CAHash is the cluster CA's public key hash ("sha256:..."), which the
	// workers check the API server against; known once init has made it.
	CAHash string
	// ProxyMode is kube-proxy's mode in its ConfigMap.
	ProxyMode string
}

// criSocket is containerd's socket as the node sees it.
const criSocket = "unix://" + containerdSocket

// initConfig is the control-plane node's `kubeadm init --config` file:
// InitConfiguration, ClusterConfiguration, and the KubeletConfiguration and
// KubeProxyConfiguration every node gets (kubeadm uploads both to
// kube-system: the kubelet-config and kube-proxy ConfigMaps).
func (n *Node) initConfig(c kubeadmCluster) string {
	return fmt.Sprintf(`# written by svclab: kubeadm init on %[1]s, the control-plane node
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: %[2]q
  description: svclab's workers join with it
  ttl: 24h0m0s
localAPIEndpoint:
  advertiseAddress: %[3]s
  bindPort: %[4]d
%[5]s---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %[6]s
clusterName: svclab
controlPlaneEndpoint: %[3]s:%[4]d
networking:
  serviceSubnet: %[7]s
  podSubnet: %[8]s
  dnsDomain: cluster.local
apiServer:
  extraArgs:
  # The API server reaches kubelets by their address: their names are in
  # no resolver the node has (kubectl exec, logs).
  - name: kubelet-preferred-address-types
    value: InternalIP
controllerManager:
  extraArgs:
  # One /%[9]d of podSubnet per node, its spec.podCIDR.
  - name: node-cidr-mask-size-ipv4
    value: "%[9]d"
---
%[10]s---
%[11]s`, n.Name, c.Token, c.Endpoint, apiserverPort, n.nodeRegistration(), KubernetesVersion,
		c.ServiceSubnet, c.PodSubnet, c.NodeMask, kubeletConfiguration, kubeProxyConfiguration(c))
}

// joinConfig is a worker's `kubeadm join --config` file.
func (n *Node) joinConfig(c kubeadmCluster) string {
	return fmt.Sprintf(`# written by svclab: kubeadm join on %[1]s, a worker
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: %[2]s:%[3]d
    token: %[4]q
    caCertHashes: [%[5]q]
%[6]s`, n.Name, c.Endpoint, apiserverPort, c.Token, c.CAHash, n.nodeRegistration())
}

// nodeRegistration is what both configurations say of the node itself,
// and where its patches are.
func (n *Node) nodeRegistration() string {
	return fmt.Sprintf(`nodeRegistration:
  name: %[1]s
  criSocket: %[2]s
  # Every image is imported into the node's containerd: nothing is pulled.
  imagePullPolicy: Never
  kubeletExtraArgs:
  # The node's address on the lab's network, where the API server and the
  # other nodes reach it.
  - name: node-ip
    value: %[3]s
  ignorePreflightErrors:
  # The machine mounts cgroup v1, which kubeadm's system verification
  # refuses; the KubeletConfiguration's failCgroupV1: false accepts it.
  - SystemVerification
patches:
  # The node's own KubeletConfiguration patch (kubeletPatch).
  directory: %[4]s
`, n.Name, criSocket, n.Addr, n.kubeadmFiles().patches)
}

// kubeletConfiguration is the KubeletConfiguration of every node: what
// kubeadm does not default and these machines need.
const kubeletConfiguration = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The machine mounts cgroup v1, which kubelet 1.35+ refuses unless told.
failCgroupV1: false
# No systemd on the machine; containerd's runc says SystemdCgroup = false.
cgroupDriver: cgroupfs
# The sysctls the kubelet checks are files of the lab in the node's mount
# namespace: fail rather than write one.
protectKernelDefaults: true
failSwapOn: false
# The machine's disk is shared: evict on its last percent only.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
`

// kubeProxyConfiguration is kube-proxy's configuration, in its ConfigMap.
func kubeProxyConfiguration(c kubeadmCluster) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: %s
conntrack:
  # kube-proxy would raise nf_conntrack_max, which is the machine's (and
  # read-only in a network namespace), and with it the conntrack hash
  # size: 0 leaves both as they are, as kind does.
  maxPerCore: 0
`, c.ProxyMode)
}

// kubeletPatch is the node's KubeletConfiguration patch (kubeadm's
// --patches, file kubeletconfiguration+strategic.yaml): what differs from
// node to node.
func (n *Node) kubeletPatch() string {
	return fmt.Sprintf(`# written by svclab: %[1]s's kubelet
# Its pods' cgroups under a root of its own in every hierarchy: two kubelets
# sharing one would each remove the other's pods' cgroups as orphans, and
# svclab down finds every pod's processes under the lab's root.
cgroupRoot: /%[2]s
`, n.Name, n.CgroupRoot)
}

// newBootstrapToken is a kubeadm bootstrap token, "[a-z0-9]{6}.[a-z0-9]{16}".
func newBootstrapToken() (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 22)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:6]) + "." + string(b[6:]), nil
}

// caCertHash is what `kubeadm join --discovery-token-ca-cert-hash` takes:
// "sha256:" and the hex SHA-256 of the CA certificate's public key
// (SubjectPublicKeyInfo, DER).
func caCertHash(caPEM []byte) (string, error) {
	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("CA certificate: no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("CA certificate: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// kubeletArgs are the kubelet's arguments as kubeadm's systemd drop-in
// (10-kubeadm.conf) gives them: its kubeconfigs, its configuration file,
// then KUBELET_KUBEADM_ARGS from the kubeadm-flags.env kubeadm wrote.
func kubeletArgs(flagsEnv string) ([]string, error) {
	args := []string{
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
		"--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml",
	}
	for _, line := range strings.Split(flagsEnv, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "KUBELET_KUBEADM_ARGS=")
		if !ok {
			continue
		}
		return append(args, strings.Fields(strings.Trim(v, `"`))...), nil
	}
	return nil, errors.New("kubeadm-flags.env: no KUBELET_KUBEADM_ARGS")
}
