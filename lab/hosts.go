package lab

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// HostRow is one row of the table of the lab's hosts that `svclab up`
// prints, and what `svclab web` shows of each host.
type HostRow struct {
	Name      string `json:"name"`
	Role      Role   `json:"role"`
	Namespace string `json:"namespace"`
	Addr      string `json:"addr"`
	Addr6     string `json:"addr6"` // "-" for none
	// Runs says what runs there: "svcproxy --mode hybrid, clusterdns on
	// :53", "svclab pod (8080/tcp, 8080/udp)".
	Runs string `json:"runs"`
}

// Hosts are the rows of WriteHosts: the Plan's hosts, or on a control plane
// the node, the client and the pods the kubelet runs, in name order.
func (l *Lab) Hosts() ([]HostRow, error) {
	st, err := l.readState()
	if err != nil {
		return nil, err
	}
	p := l.cfg.Plan
	if st.Kubectl == "" {
		return p.hostRows(fmt.Sprintf("svcproxy --mode %s, clusterdns on :53", st.Mode), p.Hosts), nil
	}
	client, _ := p.Host("client")
	if st.RealNode {
		hosts := []Host{client}
		if outside, ok := p.Host("outside"); ok {
			hosts = append(hosts, outside)
		}
		runs := fmt.Sprintf("etcd, kube-apiserver :6443, kube-controller-manager, kube-scheduler, containerd, kubelet; pods on %s in %s (svclab kubectl get pods -A -o wide)", podBridge, p.PodCIDR)
		return p.hostRows(runs, hosts), nil
	}
	pods := l.podRecords()
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	hosts := append([]Host{client}, pods...)
	if outside, ok := p.Host("outside"); ok {
		hosts = append(hosts, outside)
	}
	runs := fmt.Sprintf("etcd, kube-apiserver :6443, kube-controller-manager, kubelet (svclab), svcproxy --mode %s, clusterdns on :53", st.Mode)
	return p.hostRows(runs, hosts), nil
}

// WriteHosts writes the table of the lab's hosts that `svclab up` prints
// (Hosts).
func (l *Lab) WriteHosts(w io.Writer) error {
	rows, err := l.Hosts()
	if err != nil {
		return err
	}
	return writeHostRows(w, rows)
}

// WriteHosts writes a table of the lab's hosts: namespace, address and what
// runs there (svcproxy in mode).
func (p *Plan) WriteHosts(w io.Writer, mode string) error {
	return writeHostRows(w, p.hostRows(fmt.Sprintf("svcproxy --mode %s, clusterdns on :53", mode), p.Hosts))
}

// hostRows are the node, running nodeRuns, and hosts.
func (p *Plan) hostRows(nodeRuns string, hosts []Host) []HostRow {
	rows := []HostRow{{Name: p.Node.Name, Role: RoleNode, Namespace: p.Namespace(p.Node.Name), Addr: p.Node.Addr.String(), Addr6: addr6(p.Node), Runs: nodeRuns}}
	for _, h := range hosts {
		runs := "-"
		if h.Role == RoleOutside {
			runs = "- (outside the cluster: beyond " + p.ClusterCIDR.String() + ")"
			if p.DualStack() {
				runs = "- (outside the cluster: beyond " + p.ClusterCIDR.String() + " and " + p.ClusterCIDR6.String() + ")"
			}
		}
		if h.Role == RolePod {
			var ports []string
			for _, port := range h.TCP {
				ports = append(ports, fmt.Sprintf("%d/tcp", port))
			}
			for _, port := range h.UDP {
				ports = append(ports, fmt.Sprintf("%d/udp", port))
			}
			runs = "svclab pod (" + strings.Join(ports, ", ") + ")"
		}
		rows = append(rows, HostRow{Name: h.Name, Role: h.Role, Namespace: p.Namespace(h.Name), Addr: h.Addr.String(), Addr6: addr6(h), Runs: runs})
	}
	return rows
}

func writeHostRows(w io.Writer, rows []HostRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tNAMESPACE\tADDRESS\tIPV6 ADDRESS\tRUNS")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Namespace, r.Addr, r.Addr6, r.Runs)
	}
	return tw.Flush()
}
