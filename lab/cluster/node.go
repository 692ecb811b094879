package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// Node is one real node of the lab: a network namespace, and a mount
// namespace of its own where its containerd and its kubelet run, with the
// lab's directories as /run, /var/lib and /var/log. Everything that makes
// one node unlike another is a field here (its name and address, its pod
// range, its directory, its processes' names), so that a cluster can have
// several; Nodes makes the one the lab runs today, the Plan's node.
type Node struct {
	// Name is the Node's name (the kubelet's --hostname-override) and its
	// host's in the Plan.
	Name string
	// Addr is the node's address on its links to the lab's hosts: the
	// kubelet's --node-ip, where the API server reaches it.
	Addr netip.Addr
	// Namespace is the node's network namespace.
	Namespace string
	// PodCIDR is where its pods get their addresses (the bridge CNI's
	// host-local range); its first address is the node's, on PodBridge.
	PodCIDR netip.Prefix
	// DNS is the cluster DNS Service's address, the kubelet's clusterDNS.
	DNS netip.Addr
	// Dir holds what the node keeps: its configuration, the /run,
	// /var/lib and /var/log of its mount namespace, the namespace's pin.
	Dir string
	// StateDir is the lab's state directory, bound back into the node's
	// /run when it lives there, so that the node sees it where it is.
	StateDir string
	// Containerd and Kubelet are its processes' names among the lab's:
	// their pid files and logs in the state directory.
	Containerd, Kubelet string
	// CgroupRoot is its kubelet's cgroupRoot, a directory of that name in
	// every cgroup hierarchy, where its pods' cgroups go and where Down
	// finds their processes.
	CgroupRoot string
	// Kubeadm says kubeadm makes the node (`svclab up --nodes N`): its
	// kubelet's configuration is kubeadm's, and its /etc is an overlay of
	// its own, where kubeadm writes /etc/kubernetes. ControlPlane says it
	// runs kubeadm's control plane as static pods (kubeadm init, not join).
	Kubeadm, ControlPlane bool
}

// Nodes are the lab's real nodes: the kubeadm cluster's when the lab runs
// one (its node count is in the state), else the Plan's node, whose files
// are in the state directory's "node", whose processes are "containerd"
// and "kubelet", under the lab's cgroup root.
func (c *Cluster) Nodes() []*Node {
	if st, err := c.net.ReadState(); err == nil && st.Nodes > 0 {
		return kubeadmNodes(homePlan(c.net.Plan()), c.net.StateDir(), c.net.Cgroups().Name(), st.Nodes)
	}
	return []*Node{planNode(c.net.Plan(), c.net.StateDir(), c.net.Cgroups().Name())}
}

// homePlan is the Plan whose node is the cluster's first, the control
// plane: p itself, or, when p looks at a worker (svclab rules --node
// worker1: its Node is the worker, its Gateway the first node), the Plan
// it was made from, so that the nodes keep their names and addresses
// whichever node the lab looks at.
func homePlan(p *topology.Plan) *topology.Plan {
	if p.Gateway.Name == "" {
		return p
	}
	home := *p
	home.Node, home.Gateway, home.Uplink = p.Gateway, topology.Host{}, ""
	return &home
}

// everyNode is every node a lab may have run, whatever the state says:
// the names are fixed, so Down finds what a crashed `svclab up` left.
func (c *Cluster) everyNode() []*Node {
	p, dir, root := c.net.Plan(), c.net.StateDir(), c.net.Cgroups().Name()
	return append([]*Node{planNode(p, dir, root)}, kubeadmNodes(p, dir, root, MaxNodes)[1:]...)
}

// planNode is the Node of the Plan's node.
func planNode(p *topology.Plan, stateDir, cgroupRoot string) *Node {
	return &Node{
		Name:       p.Node.Name,
		Addr:       p.Node.Addr,
		Namespace:  p.Namespace(p.Node.Name),
		PodCIDR:    p.PodCIDR,
		DNS:        p.DNS,
		Dir:        filepath.Join(stateDir, "node"),
		StateDir:   stateDir,
		Containerd: "containerd",
		Kubelet:    "kubelet",
		CgroupRoot: cgroupRoot,
	}
}

// start writes n's files, readies it (prepare), and starts its kubelet:
// a real node of the lab's own control plane (svclab up --kubelet).
func (n *Node) start(ctx context.Context, net *topology.Net, progs NodePrograms) error {
	f := n.files()
	if err := n.writeFiles(net, progs.Runc); err != nil {
		return err
	}
	if err := n.prepare(ctx, net, progs.Images); err != nil {
		return err
	}
	_, _, err := net.Start(n.Kubelet, "", n.inNode(progs.Kubelet,
		"--config="+f.kubelet,
		"--kubeconfig="+f.kubeconfig,
		"--hostname-override="+n.Name,
		// The node's address is on its links to the lab's hosts; the API
		// server reaches the kubelet there (--kubelet-preferred-address-types).
		"--node-ip="+n.Addr.String(),
	), false)
	return err
}

// prepare readies n for its kubelet once its files are written, the same
// on every real node (the kubeadm cluster's too): its mount namespace,
// br_netfilter, its containerd with the images imported.
func (n *Node) prepare(ctx context.Context, net *topology.Net, images []string) error {
	if err := n.makeMountNS(ctx, net); err != nil {
		return err
	}
	// Pods behind the bridge answer Services' clients over it; only with
	// br_netfilter do those replies pass the node's conntrack, which undoes
	// the DNAT (per network namespace on this kernel).
	if err := topology.Run(ctx, "ip", "netns", "exec", n.Namespace, "sysctl", "-qw",
		"net.bridge.bridge-nf-call-iptables=1", "net.bridge.bridge-nf-call-ip6tables=1"); err != nil {
		return err
	}
	return n.startContainerd(ctx, net, images)
}

// startContainerd starts n's containerd, waits for it to answer, and
// imports the image archives.
func (n *Node) startContainerd(ctx context.Context, net *topology.Net, images []string) error {
	f := n.files()
	ctrd, _, err := net.Start(n.Containerd, "", n.inNode(containerdBin, "--config", f.containerd), false)
	if err != nil {
		return err
	}
	sock := filepath.Join(f.run, strings.TrimPrefix(containerdSocket, "/run/"))
	if err := net.Wait(ctx, n.Containerd, ctrd.Process.Pid, ControlPlaneTimeout, 200*time.Millisecond, func(context.Context) error {
		return topology.Run(ctx, n.inNode(ctrBin, "--address", containerdSocket, "version")...)
	}); err != nil {
		return fmt.Errorf("%w (socket %s)", err, sock)
	}
	for _, img := range images {
		if err := topology.Run(ctx, n.inNode(ctrBin, "--address", containerdSocket, "-n", "k8s.io", "images", "import", "--all-platforms", img)...); err != nil {
			return fmt.Errorf("import %s: %w", img, err)
		}
	}
	return nil
}

// inNode is argv run in the node: its network namespace and its mount
// namespace.
func (n *Node) inNode(argv ...string) []string {
	return append([]string{"nsenter", "--mount=" + n.files().pin, "--net=" + filepath.Join(topology.NetnsDir, n.Namespace), "--"}, argv...)
}

// writeFiles writes the configuration of containerd, the kubelet and
// CNI, the sysctl files, and makes the directories the node's mount
// namespace binds, and the cgroup root in every hierarchy.
func (n *Node) writeFiles(net *topology.Net, runc string) error {
	if err := n.writeRuntimeFiles(net, runc); err != nil {
		return err
	}
	f := n.files()
	files := map[string]string{
		f.kubelet: n.kubeletConfig(),
		filepath.Join(f.cniDir, "10-svclab.conflist"): cniConfig(n.PodCIDR),
	}
	for path, body := range files {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return err
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(pkiDir(n.StateDir), "ca.crt"))
	if err != nil {
		return err
	}
	tok, err := os.ReadFile(filepath.Join(pkiDir(n.StateDir), n.Name+".token"))
	if err != nil {
		return err
	}
	user := "system:node:" + n.Name
	return writeKubeconfig(f.kubeconfig, apiserverURL, caPEM, user, strings.TrimSpace(string(tok)))
}

// writeRuntimeFiles writes what every real node has, the kubeadm
// cluster's too: containerd's configuration (runc is its runc, "" for the
// one on PATH), the node's resolv.conf, the sysctl files; the directories
// the node's mount namespace binds, and its cgroup root in every hierarchy.
func (n *Node) writeRuntimeFiles(net *topology.Net, runc string) error {
	f := n.files()
	for _, d := range []string{f.run, f.varlib, f.varlog, f.cniDir, f.sysctls, filepath.Dir(f.pin),
		filepath.Join(f.usrLib, "upper"), filepath.Join(f.usrLib, "work")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if rel, ok := underRun(n.StateDir); ok {
		if err := os.MkdirAll(filepath.Join(f.run, rel), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		f.containerd: f.containerdConfig(runc),
		f.resolvConf: n.resolvConf(),
	}
	for _, s := range kubeletSysctls {
		files[filepath.Join(f.sysctls, strings.ReplaceAll(s.name, "/", "."))] = s.value + "\n"
	}
	for path, body := range files {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return err
		}
	}
	for _, m := range net.Cgroups().Machine() {
		if err := os.MkdirAll(filepath.Join(m.Point, n.CgroupRoot), 0o755); err != nil {
			return fmt.Errorf("cgroup root: %w", err)
		}
	}
	return nil
}

// makeMountNS makes the node's mount namespace and keeps it with a bind
// mount (the pin), as `ip netns add` keeps a network namespace: the pin's
// directory is a private mount of its own, or the kernel would refuse to
// keep a namespace there. Then the mounts of mountCommands, inside it.
func (n *Node) makeMountNS(ctx context.Context, net *topology.Net) error {
	f := n.files()
	dir := filepath.Dir(f.pin)
	if err := os.WriteFile(f.pin, nil, 0o644); err != nil {
		return err
	}
	for _, argv := range [][]string{
		{"mount", "--bind", dir, dir},
		{"mount", "--make-private", dir},
		{"unshare", "--mount=" + f.pin, "--propagation", "private", "true"},
	} {
		if err := topology.Run(ctx, argv...); err != nil {
			return err
		}
	}
	_, err := os.Stat("/lib/modules")
	cmds := f.mountCommands(net.Cgroups().Machine(), n.StateDir, errors.Is(err, fs.ErrNotExist))
	if n.Kubeadm {
		cmds = append(cmds, n.kubeadmFiles().etcOverlay())
	}
	for _, argv := range cmds {
		if err := topology.Run(ctx, n.inNode(argv...)...); err != nil {
			return err
		}
	}
	return nil
}

// reach is path in n's mount namespace as a process of the machine reaches
// it: through /proc/PID/root of a process of that namespace, n's
// containerd, as one reaches into a container's files. The kernel resolves
// /proc/PID/root to the root of the process's mount namespace and walks
// on through that namespace's mounts (the node's bpffs on /sys/fs/bpf, say);
// what is opened that way stays open when the process ends. svclab cannot
// enter the namespace itself: a thread of a process that shares its
// filesystem information with others (every Go thread) may not (setns(2)).
func (n *Node) reach(net *topology.Net, path string) (string, error) {
	pid, ok := net.ReadPid(n.Containerd, "")
	if !ok || !sameFile(filepath.Join("/proc", strconv.Itoa(pid), "ns", "mnt"), n.files().pin) {
		return "", fmt.Errorf("node %s: its containerd does not run (%s), through whose /proc/PID/root svclab reaches the node's mount namespace", n.Name, net.PidPath(n.Containerd))
	}
	return filepath.Join("/proc", strconv.Itoa(pid), "root", path), nil
}

// sameFile says whether a and b are one file (a namespace and its pin, say).
func sameFile(a, b string) bool {
	var sa, sb unix.Stat_t
	return unix.Stat(a, &sa) == nil && unix.Stat(b, &sb) == nil && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
