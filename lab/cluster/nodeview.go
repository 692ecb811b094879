package cluster

import (
	"cmp"
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeView is what the lab shows of one node of a cluster, as the API
// server has it (`svclab up`'s table of hosts, `svclab web`'s nodes): what
// `kubectl get nodes -o wide` and `kubectl get pods -A -o wide` say of it.
type NodeView struct {
	Name string `json:"name"`
	// Role is "control-plane" for a node labelled
	// node-role.kubernetes.io/control-plane (kubeadm labels the node of
	// `kubeadm init`), "worker" otherwise.
	Role string `json:"role"`
	// Addr is the node's InternalIP.
	Addr string `json:"addr"`
	// Ready is the node's Ready condition: its kubelet reports.
	Ready bool `json:"ready"`
	// PodCIDR is spec.podCIDR, the range kube-controller-manager gave the
	// node, from which its CNI plugin gives its pods their addresses.
	PodCIDR string `json:"podCIDR"`
	// Taints are "KEY:EFFECT" (kubeadm's node-role.kubernetes.io/control-plane:NoSchedule).
	Taints []string `json:"taints,omitempty"`
	// Pods are the pods bound to the node, by namespace and name.
	Pods []PodView `json:"pods"`
}

// PodView is one pod of a NodeView.
type PodView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// IP is status.podIP: in the node's PodCIDR, or the node's own address
	// for a pod on the host's network.
	IP          string `json:"ip,omitempty"`
	HostNetwork bool   `json:"hostNetwork,omitempty"`
	// Phase is status.phase (Pending, Running, Succeeded, Failed).
	Phase string `json:"phase"`
	// Ready is the pod's Ready condition: its Services send it traffic.
	Ready bool `json:"ready"`
	// Owner is what made the pod: "DaemonSet/kube-proxy",
	// "ReplicaSet/coredns-...", "Node/node" for a static pod.
	Owner string `json:"owner,omitempty"`
}

// FullName is "NAMESPACE/NAME".
func (p PodView) FullName() string { return p.Namespace + "/" + p.Name }

// ControlPlaneLabel is the label kubeadm puts on the control-plane node.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// NodeViews are the cluster's nodes as the API server has them, the
// control plane's first, then by name; each with its pods, by namespace and
// name. A lab without a control plane has none (nil, nil).
func (c *Cluster) NodeViews(ctx context.Context) ([]NodeView, error) {
	st, err := c.net.ReadState()
	if err != nil || st.Kubectl == "" {
		return nil, err
	}
	client, err := c.Client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return nodeViews(nodes.Items, pods.Items), nil
}

// nodeViews is NodeViews of the objects the API server listed.
func nodeViews(nodes []corev1.Node, pods []corev1.Pod) []NodeView {
	views := make([]NodeView, 0, len(nodes))
	index := map[string]int{}
	for _, n := range nodes {
		v := NodeView{Name: n.Name, Role: "worker", PodCIDR: n.Spec.PodCIDR, Pods: []PodView{}}
		if _, ok := n.Labels[ControlPlaneLabel]; ok {
			v.Role = "control-plane"
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && v.Addr == "" {
				v.Addr = a.Address
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				v.Ready = c.Status == corev1.ConditionTrue
			}
		}
		for _, t := range n.Spec.Taints {
			v.Taints = append(v.Taints, t.Key+":"+string(t.Effect))
		}
		index[n.Name] = len(views)
		views = append(views, v)
	}
	for _, p := range pods {
		i, ok := index[p.Spec.NodeName]
		if !ok {
			continue // not scheduled yet, or on a node that is gone
		}
		pv := PodView{Namespace: p.Namespace, Name: p.Name, IP: p.Status.PodIP, HostNetwork: p.Spec.HostNetwork, Phase: string(p.Status.Phase)}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				pv.Ready = c.Status == corev1.ConditionTrue
			}
		}
		if o := metav1.GetControllerOf(&p); o != nil {
			pv.Owner = o.Kind + "/" + o.Name
		}
		views[i].Pods = append(views[i].Pods, pv)
	}
	for i := range views {
		slices.SortFunc(views[i].Pods, func(a, b PodView) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
	}
	slices.SortFunc(views, func(a, b NodeView) int {
		return cmp.Or(cmp.Compare(roleOrder(a.Role), roleOrder(b.Role)), cmp.Compare(a.Name, b.Name))
	})
	return views
}

func roleOrder(role string) int {
	if role == "control-plane" {
		return 0
	}
	return 1
}
