package lab

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// Hosts are the rows of WriteHosts: the Plan's hosts, or on a control plane
// the node, the client and the pods the kubelet runs, in name order.
func (l *Lab) Hosts() ([]topology.HostRow, error) {
	st, err := l.net.ReadState()
	if err != nil {
		return nil, err
	}
	p := l.cfg.Plan
	if st.Kubectl == "" {
		return p.HostRows(fmt.Sprintf("svcproxy --mode %s, clusterdns on :53", st.Mode), p.Hosts), nil
	}
	client, _ := p.Host("client")
	if st.Nodes > 0 {
		return l.kubeadmHosts(client), nil
	}
	if st.RealNode {
		hosts := []topology.Host{client}
		if outside, ok := p.Host("outside"); ok {
			hosts = append(hosts, outside)
		}
		runs := fmt.Sprintf("etcd, kube-apiserver :6443, kube-controller-manager, kube-scheduler, containerd, kubelet; pods on %s in %s (svclab kubectl get pods -A -o wide)", cluster.PodBridge, p.PodCIDR)
		return p.HostRows(runs, hosts), nil
	}
	pods := l.net.AddedHosts()
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	hosts := append([]topology.Host{client}, pods...)
	if outside, ok := p.Host("outside"); ok {
		hosts = append(hosts, outside)
	}
	runs := fmt.Sprintf("etcd, kube-apiserver :6443, kube-controller-manager, kubelet (svclab), svcproxy --mode %s, clusterdns on :53", st.Mode)
	return p.HostRows(runs, hosts), nil
}

// WriteHosts writes the table of the lab's hosts that `svclab up` prints
// (Hosts).
func (l *Lab) WriteHosts(w io.Writer) error {
	rows, err := l.Hosts()
	if err != nil {
		return err
	}
	return topology.WriteHostRows(w, rows)
}

// kubeadmHosts are the rows of the kubeadm cluster: the control-plane
// node, the workers, the client and the outside host, each node with the
// pod range kube-controller-manager gave it and the pods bound to it.
func (l *Lab) kubeadmHosts(client topology.Host) []topology.HostRow {
	p := l.cfg.Plan
	nodes, _ := l.cluster.NodeViews(context.Background()) // none: the table without pods
	pods := func(name string) string {
		i := slices.IndexFunc(nodes, func(v cluster.NodeView) bool { return v.Name == name })
		if i < 0 {
			return ""
		}
		v := nodes[i]
		s := fmt.Sprintf("; pods on %s in %s", cluster.PodBridge, v.PodCIDR)
		if len(v.Pods) > 0 {
			names := make([]string, len(v.Pods))
			for i, p := range v.Pods {
				names[i] = p.FullName()
			}
			s += ": " + strings.Join(names, ", ")
		}
		return s
	}
	rows := p.HostRows("kubeadm's control plane (etcd, kube-apiserver :6443, kube-controller-manager, kube-scheduler: static pods), containerd, kubelet"+pods(p.Node.Name), nil)
	for _, h := range l.net.AddedHosts() {
		if h.Role == topology.RoleNode {
			rows = append(rows, topology.HostRow{Name: h.Name, Role: h.Role, Namespace: p.Namespace(h.Name),
				Addr: h.Addr.String(), Addr6: "-", Runs: "containerd, kubelet (kubeadm join)" + pods(h.Name)})
		}
	}
	hosts := []topology.Host{client}
	if outside, ok := p.Host("outside"); ok {
		hosts = append(hosts, outside)
	}
	return append(rows, p.HostRows("", hosts)[1:]...)
}

// Nodes are the cluster's nodes and the pods on each, as the API server
// has them (`svclab web` draws them); none on a lab without a control
// plane (see cluster.Cluster.NodeViews).
func (l *Lab) Nodes(ctx context.Context) ([]cluster.NodeView, error) {
	return l.cluster.NodeViews(ctx)
}
