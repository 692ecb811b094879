package topology

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// Host finds a lab host by name: in the Plan, or among the hosts added to
// it since (AddHost: the pods the control-plane lab's kubelet runs).
func (n *Net) Host(name string) (Host, bool) {
	if h, ok := n.cfg.Plan.Host(name); ok {
		return h, true
	}
	return n.record(name)
}

// HostNames are the names of the lab's hosts, the node first.
func (n *Net) HostNames() []string {
	names := []string{n.cfg.Plan.Node.Name}
	if g := n.cfg.Plan.Gateway.Name; g != "" {
		names = append(names, g)
	}
	for _, h := range n.cfg.Plan.Hosts {
		names = append(names, h.Name)
	}
	for _, h := range n.AddedHosts() {
		if _, ok := n.cfg.Plan.Host(h.Name); !ok {
			names = append(names, h.Name)
		}
	}
	return names
}

// Names maps each host's address to its name, for reports: the Plan's and
// the added hosts'.
func (n *Net) Names() map[netip.Addr]string {
	m := n.cfg.Plan.Names()
	for _, h := range n.AddedHosts() {
		m[h.Addr] = h.Name
	}
	return m
}

// HostName names an address as the lab knows it: "web-0", "node"; "" when
// the address is no lab host.
func (n *Net) HostName(a netip.Addr) string { return n.Names()[a] }

// WithName writes an address and, when it is a lab host, its name:
// "198.19.1.10 (web-0)".
func (n *Net) WithName(a netip.Addr) string {
	if name := n.HostName(a); name != "" {
		return a.String() + " (" + name + ")"
	}
	return a.String()
}

// Build makes the node's namespace, the namespaces of the Plan's hosts
// that include selects, their links and routes, and their resolv.conf.
func (n *Net) Build(ctx context.Context, include func(Host) bool) error {
	p := n.cfg.Plan
	cmds := p.NodeCommands()
	var hosts []Host
	for _, h := range p.Hosts {
		if include(h) {
			cmds = append(cmds, p.HostCommands(h)...)
			hosts = append(hosts, h)
		}
	}
	for _, argv := range append(cmds, p.ServiceRouteCommands()...) {
		if err := Run(ctx, argv...); err != nil {
			return err
		}
	}
	for _, h := range hosts {
		if err := n.writeResolvConf(h); err != nil {
			return err
		}
	}
	return nil
}

// AddHost makes a host beyond the Plan (a pod the control-plane lab's
// kubelet runs): its namespace and link, its resolv.conf, and a record in
// the state directory, so that other svclab commands (exec, traffic's
// table) know it.
func (n *Net) AddHost(ctx context.Context, h Host) error {
	for _, argv := range n.cfg.Plan.HostCommands(h) {
		if err := Run(ctx, argv...); err != nil {
			return err
		}
	}
	if err := n.writeResolvConf(h); err != nil {
		return err
	}
	return n.RecordHost(h)
}

// RecordHost records h, a host beyond the Plan that the caller made (a
// worker node of the kubeadm cluster), in the state directory, so that other
// svclab commands (exec, traffic's table) know it.
func (n *Net) RecordHost(h Host) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(n.recordPath(h.Name)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(n.recordPath(h.Name), b, 0o644)
}

// RemoveHost removes what AddHost made, once nothing runs there: the
// namespace (its links and routes go with it), the host's cgroup, its files.
// Nothing there is no error.
func (n *Net) RemoveHost(name string) error {
	ns := n.cfg.Plan.Namespace(name)
	if _, err := os.Stat(filepath.Join(NetnsDir, ns)); err == nil {
		if err := Run(context.Background(), "ip", "netns", "del", ns); err != nil {
			return err
		}
	}
	os.RemoveAll(filepath.Join(EtcNetnsDir, ns))
	if err := n.cgroups.RemoveHost(name); err != nil {
		return err
	}
	os.Remove(n.recordPath(name))
	return nil
}

// AddedHosts are the hosts AddHost made that are there now.
func (n *Net) AddedHosts() []Host {
	files, _ := filepath.Glob(filepath.Join(n.cfg.StateDir, "pods", "*.json"))
	var hosts []Host
	for _, f := range files {
		if h, ok := n.record(strings.TrimSuffix(filepath.Base(f), ".json")); ok {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

func (n *Net) recordPath(host string) string {
	return filepath.Join(n.cfg.StateDir, "pods", host+".json")
}

func (n *Net) record(host string) (Host, bool) {
	b, err := os.ReadFile(n.recordPath(host))
	if err != nil {
		return Host{}, false
	}
	var h Host
	if json.Unmarshal(b, &h) != nil {
		return Host{}, false
	}
	return h, true
}

// writeResolvConf writes the resolv.conf that `ip netns exec` mounts in h.
func (n *Net) writeResolvConf(h Host) error {
	p := n.cfg.Plan
	dir := filepath.Join(EtcNetnsDir, p.Namespace(h.Name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := p.ResolvConf()
	if h.Role == RoleOutside {
		conf = p.OutsideResolvConf()
	}
	return os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(conf), 0o644)
}
