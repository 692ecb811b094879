package lab

import (
	"fmt"
	"io"
	"sort"

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
	if st.RealNode {
		hosts := []topology.Host{client}
		if outside, ok := p.Host("outside"); ok {
			hosts = append(hosts, outside)
		}
		runs := fmt.Sprintf("etcd, kube-apiserver :6443, kube-controller-manager, kube-scheduler, containerd, kubelet; pods on %s in %s (svclab kubectl get pods -A -o wide)", podBridge, p.PodCIDR)
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
