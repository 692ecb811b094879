package topology

import (
	"fmt"
	"io"
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
	// Link is the node's end of the veth pair to the host ("" for the
	// node): the picture of `svclab web` names each link by it.
	Link string `json:"link,omitempty"`
}

// WriteHosts writes a table of the lab's hosts: namespace, address and what
// runs there (svcproxy in mode).
func (p *Plan) WriteHosts(w io.Writer, mode string) error {
	return WriteHostRows(w, p.HostRows(fmt.Sprintf("svcproxy --mode %s, clusterdns on :53", mode), p.Hosts))
}

// HostRows are the node, running nodeRuns, and hosts.
func (p *Plan) HostRows(nodeRuns string, hosts []Host) []HostRow {
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
		rows = append(rows, HostRow{Name: h.Name, Role: h.Role, Namespace: p.Namespace(h.Name), Addr: h.Addr.String(), Addr6: addr6(h), Runs: runs, Link: h.NodeLink})
	}
	return rows
}

// WriteHostRows writes rows as the table `svclab up` prints.
func WriteHostRows(w io.Writer, rows []HostRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tNAMESPACE\tADDRESS\tIPV6 ADDRESS\tRUNS")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Namespace, r.Addr, r.Addr6, r.Runs)
	}
	return tw.Flush()
}

// addr6 is h's IPv6 address for a table, "-" for none.
func addr6(h Host) string {
	if !h.Addr6.IsValid() {
		return "-"
	}
	return h.Addr6.String()
}
