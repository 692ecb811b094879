package cluster

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeViews: the nodes as kubeadm's cluster has them, the control
// plane first whatever the API's order; each pod on its node with its
// address, readiness and owner; a pod not yet scheduled on none.
func TestNodeViews(t *testing.T) {
	node := func(name, addr, cidr string, labels map[string]string, ready corev1.ConditionStatus, taints ...corev1.Taint) corev1.Node {
		return corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       corev1.NodeSpec{PodCIDR: cidr, Taints: taints},
			Status: corev1.NodeStatus{
				Addresses:  []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: addr}},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}},
			},
		}
	}
	yes := true
	pod := func(ns, name, nodeName, ip string, ready corev1.ConditionStatus, owner string, hostNet bool) corev1.Pod {
		p := corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.PodSpec{NodeName: nodeName, HostNetwork: hostNet},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}},
		}
		if owner != "" {
			kind, oname, _ := strings.Cut(owner, "/")
			p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: oname, Controller: &yes}}
		}
		return p
	}
	nodes := []corev1.Node{
		node("worker2", "198.19.0.3", "198.19.66.0/24", nil, corev1.ConditionTrue),
		node("worker1", "198.19.0.2", "198.19.65.0/24", nil, corev1.ConditionFalse),
		node("node", "198.19.0.1", "198.19.64.0/24", map[string]string{ControlPlaneLabel: ""}, corev1.ConditionTrue,
			corev1.Taint{Key: ControlPlaneLabel, Effect: corev1.TaintEffectNoSchedule}),
	}
	pods := []corev1.Pod{
		pod("default", "web-b", "worker1", "198.19.65.4", corev1.ConditionFalse, "ReplicaSet/web-7d9", false),
		pod("kube-system", "kube-proxy-x", "worker1", "198.19.0.2", corev1.ConditionTrue, "DaemonSet/kube-proxy", true),
		pod("default", "web-a", "worker1", "198.19.65.3", corev1.ConditionTrue, "ReplicaSet/web-7d9", false),
		pod("kube-system", "etcd-node", "node", "198.19.0.1", corev1.ConditionTrue, "Node/node", true),
		pod("default", "pending", "", "", corev1.ConditionFalse, "", false),
	}
	got := nodeViews(nodes, pods)
	require.Equal(t, []NodeView{
		{Name: "node", Role: "control-plane", Addr: "198.19.0.1", Ready: true, PodCIDR: "198.19.64.0/24",
			Taints: []string{ControlPlaneLabel + ":NoSchedule"},
			Pods:   []PodView{{Namespace: "kube-system", Name: "etcd-node", IP: "198.19.0.1", HostNetwork: true, Phase: "Running", Ready: true, Owner: "Node/node"}}},
		{Name: "worker1", Role: "worker", Addr: "198.19.0.2", Ready: false, PodCIDR: "198.19.65.0/24", Pods: []PodView{
			{Namespace: "default", Name: "web-a", IP: "198.19.65.3", Phase: "Running", Ready: true, Owner: "ReplicaSet/web-7d9"},
			{Namespace: "default", Name: "web-b", IP: "198.19.65.4", Phase: "Running", Ready: false, Owner: "ReplicaSet/web-7d9"},
			{Namespace: "kube-system", Name: "kube-proxy-x", IP: "198.19.0.2", HostNetwork: true, Phase: "Running", Ready: true, Owner: "DaemonSet/kube-proxy"},
		}},
		{Name: "worker2", Role: "worker", Addr: "198.19.0.3", Ready: true, PodCIDR: "198.19.66.0/24", Pods: []PodView{}},
	}, got)
	require.Equal(t, "default/web-a", got[1].Pods[0].FullName())
}
