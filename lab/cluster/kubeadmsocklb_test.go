package cluster

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// kubeadmProxyDaemonSet is kube-proxy's DaemonSet as kubeadm makes it
// (deploy/kubeadm holds kubeadm's own print of it).
func kubeadmProxyDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	b, err := os.ReadFile("../../deploy/kubeadm/kube-proxy.yaml")
	require.NoError(t, err)
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var ds appsv1.DaemonSet
		require.NoError(t, yaml.Unmarshal([]byte(doc), &ds))
		if ds.Kind == "DaemonSet" {
			return &ds
		}
	}
	t.Fatal("no DaemonSet in deploy/kubeadm/kube-proxy.yaml")
	return nil
}

// TestSocketLBPatch adds what the socket LB needs to kubeadm's kube-proxy
// DaemonSet and takes it away again: the node's cgroup2 hierarchy and
// bpffs as hostPath volumes mounted in kube-proxy's container, the flags
// beside --config naming the node's own directory through $(NODE_NAME),
// which the DaemonSet's env sets from spec.nodeName; applied twice, the
// same; taken away, the DaemonSet is kubeadm's again.
func TestSocketLBPatch(t *testing.T) {
	ds := kubeadmProxyDaemonSet(t)
	kubeadm := ds.Spec.Template.Spec.DeepCopy()
	spec := &ds.Spec.Template.Spec
	require.False(t, hasSocketLB(spec))

	s := socketLBPod{Cgroup2: "/sys/fs/cgroup/unified", Root: "svclab"}
	withSocketLB(spec, s)
	require.True(t, hasSocketLB(spec))
	c := spec.Containers[0]
	require.Equal(t, []string{
		"/usr/local/bin/kube-proxy",
		"--config=/var/lib/kube-proxy/config.conf",
		"--hostname-override=$(NODE_NAME)",
		"--socklb-cgroup=/run/svcproxy/cgroupv2/svclab/$(NODE_NAME)",
		"--socklb-pin-path=/sys/fs/bpf/svcproxy",
	}, c.Command)
	require.Contains(t, c.Env, corev1.EnvVar{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}})

	volumes := map[string]corev1.HostPathVolumeSource{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			volumes[v.Name] = *v.HostPath
		}
	}
	dir := corev1.HostPathDirectory
	require.Equal(t, corev1.HostPathVolumeSource{Path: "/sys/fs/cgroup/unified", Type: &dir}, volumes["svcproxy-cgroup2"])
	require.Equal(t, corev1.HostPathVolumeSource{Path: "/sys/fs/bpf", Type: &dir}, volumes["svcproxy-bpffs"])
	require.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: "svcproxy-cgroup2", MountPath: "/run/svcproxy/cgroupv2"})
	require.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: "svcproxy-bpffs", MountPath: "/sys/fs/bpf"})
	// kubeadm's own volumes stay.
	require.Len(t, spec.Volumes, len(kubeadm.Volumes)+2)
	require.Len(t, c.VolumeMounts, len(kubeadm.Containers[0].VolumeMounts)+2)

	once := spec.DeepCopy()
	withSocketLB(spec, s)
	require.True(t, equality.Semantic.DeepEqual(once, spec), "applied twice: the same DaemonSet")

	withoutSocketLB(spec)
	require.False(t, hasSocketLB(spec))
	require.True(t, equality.Semantic.DeepEqual(kubeadm, spec), "taken away: kubeadm's DaemonSet again")
	withoutSocketLB(spec)
	require.True(t, equality.Semantic.DeepEqual(kubeadm, spec), "taken away twice: kubeadm's DaemonSet still")
}

// TestSocketLBCgroupFlag: the flag names the container's mount of the
// hierarchy, wherever the node mounts it.
func TestSocketLBCgroupFlag(t *testing.T) {
	require.Equal(t, "--socklb-cgroup=/run/svcproxy/cgroupv2/svclab/$(NODE_NAME)",
		socketLBPod{Cgroup2: "/sys/fs/cgroup", Root: "svclab"}.cgroupFlag())
}

// TestSocketLBPatchDocumented checks the pod template docs/operations.md
// shows for the lab's nodes is what withSocketLB makes of kubeadm's.
func TestSocketLBPatchDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), "this is the pod template it adds")
	require.True(t, ok, "docs/operations.md: no socklb pod template")
	_, block, ok := strings.Cut(after, "```yaml\n")
	require.True(t, ok)
	block, _, _ = strings.Cut(block, "```")
	var documented corev1.PodSpec
	require.NoError(t, yaml.UnmarshalStrict([]byte(block), &documented))

	spec := &kubeadmProxyDaemonSet(t).Spec.Template.Spec
	withSocketLB(spec, socketLBPod{Cgroup2: "/sys/fs/cgroup/unified", Root: "svclab"})
	c := spec.Containers[0]
	require.Equal(t, c.Command, documented.Containers[0].Command)
	require.Equal(t, c.VolumeMounts[len(c.VolumeMounts)-2:], documented.Containers[0].VolumeMounts)
	require.Equal(t, spec.Volumes[len(spec.Volumes)-2:], documented.Volumes)
}
