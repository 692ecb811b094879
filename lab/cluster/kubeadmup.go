package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// KubeProxyModes are the modes kube-proxy v1.37 takes on Linux.
var KubeProxyModes = []string{"iptables", "nftables", "ipvs"}

// CheckKubeProxyMode says whether mode is one kube-proxy takes.
func CheckKubeProxyMode(mode string) error {
	if !slices.Contains(KubeProxyModes, mode) {
		return fmt.Errorf("kube-proxy's mode %q: want one of %s (svcproxy's own modes: svclab use svcproxy, then svclab mode)", mode, strings.Join(KubeProxyModes, ", "))
	}
	return nil
}

// kubeadmTimeout bounds each step of the kubeadm cluster's start: an
// init, a join, the nodes Ready, kube-proxy's and CoreDNS's pods Ready.
const kubeadmTimeout = 5 * time.Minute

// UpKubeadm builds the kubeadm cluster of count nodes, once the state
// directory is there: the Plan's node (the control plane), the client and
// the outside host; the workers and the switch; on every node its mount
// namespace, containerd with the images imported; `kubeadm init` on the
// control-plane node and `kubeadm join` on the workers, each node's
// kubelet started by the lab where kubeadm would have systemd start it;
// then the pods' network, kindnetd's part: each node's CNI configuration
// on the pod range kube-controller-manager gave it, and the routes between
// nodes. It returns once every node is Ready and kube-proxy's and CoreDNS's
// pods are, with kube-proxy in proxyMode.
func (c *Cluster) UpKubeadm(ctx context.Context, progs KubeadmPrograms, count int, proxyMode string) error {
	if count < 1 || count > MaxNodes {
		return fmt.Errorf("--nodes %d: want 1 to %d", count, MaxNodes)
	}
	p := c.net.Plan()
	nodes := kubeadmNodes(p, c.net.StateDir(), c.net.Cgroups().Name(), count)
	if err := c.net.Build(ctx, notPod); err != nil {
		return err
	}
	for _, argv := range kubeadmNetCommands(p, nodes) {
		if err := topology.Run(ctx, argv...); err != nil {
			return err
		}
	}
	for _, n := range nodes[1:] {
		if err := c.net.RecordHost(topology.Host{Name: n.Name, Role: topology.RoleNode, Addr: n.Addr}); err != nil {
			return err
		}
	}
	if err := writeExecFiles(topology.EtcNetnsDir, nodes); err != nil {
		return err
	}
	token, err := newBootstrapToken()
	if err != nil {
		return err
	}
	kc := kubeadmCluster{
		Endpoint: nodes[0].Addr, ServiceSubnet: p.ServiceCIDR, PodSubnet: kubeadmPodSubnet,
		NodeMask: kubeadmNodeMask, Token: token, ProxyMode: proxyMode,
	}
	if err := eachNode(nodes, func(n *Node) error { return n.prepareKubeadm(ctx, c.net, nodes, progs) }); err != nil {
		return err
	}
	if err := c.kubeadm(ctx, nodes[0], progs, "init", nodes[0].initConfig(kc)); err != nil {
		return err
	}
	if err := nodes[0].copyAdminKubeconfig(c.KubeconfigPath("admin")); err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(nodes[0].kubeadmFiles().etcUpper, "kubernetes", "pki", "ca.crt"))
	if err != nil {
		return err
	}
	if kc.CAHash, err = caCertHash(caPEM); err != nil {
		return err
	}
	if err := eachNode(nodes[1:], func(n *Node) error { return c.kubeadm(ctx, n, progs, "join", n.joinConfig(kc)) }); err != nil {
		return err
	}
	client, err := c.Client()
	if err != nil {
		return err
	}
	if err := c.podNetwork(ctx, client, nodes); err != nil {
		return err
	}
	return c.waitKubeadm(ctx, client, nodes)
}

// eachNode runs fn for every node at once, and returns their errors.
func eachNode(nodes []*Node, fn func(*Node) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			if err := fn(n); err != nil {
				errs[i] = fmt.Errorf("node %s: %w", n.Name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// prepareKubeadm makes what kubeadm expects of a node before it runs
// there: the node's files, its mount namespace, br_netfilter, containerd
// with every image imported, the kubelet on PATH.
func (n *Node) prepareKubeadm(ctx context.Context, net *topology.Net, nodes []*Node, progs KubeadmPrograms) error {
	if err := n.writeKubeadmFiles(net, nodes, progs); err != nil {
		return err
	}
	return n.prepare(ctx, net, progs.Images)
}

// writeKubeadmFiles writes what a kubeadm node has beyond any real
// node's files: the kubelet patch, the upper layer of its /etc (its hosts
// and resolv.conf; kubeadm writes /etc/kubernetes there), and a directory
// on PATH holding the kubelet, where kubeadm's preflight asks its version.
func (n *Node) writeKubeadmFiles(net *topology.Net, nodes []*Node, progs KubeadmPrograms) error {
	if err := n.writeRuntimeFiles(net, progs.Runc); err != nil {
		return err
	}
	k := n.kubeadmFiles()
	for _, d := range []string{k.patches, k.etcUpper, k.etcWork, k.bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		filepath.Join(k.patches, "kubeletconfiguration+strategic.yaml"): n.kubeletPatch(),
		filepath.Join(k.etcUpper, "hosts"):                              etcHosts(nodes),
		filepath.Join(k.etcUpper, "resolv.conf"):                        n.resolvConf(),
	}
	for path, body := range files {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return err
		}
	}
	link := filepath.Join(k.bin, "kubelet")
	os.Remove(link)
	return os.Symlink(progs.Kubelet, link)
}

// kubeadm runs `kubeadm init` or `kubeadm join` (verb) on n with config,
// and starts n's kubelet once kubeadm has written its configuration
// (kubeadm's kubelet-start phase, which would have systemd start it), with
// the arguments kubeadm's systemd drop-in gives it. Its output goes to
// kubeadm-VERB-NODE.log in the state directory.
func (c *Cluster) kubeadm(ctx context.Context, n *Node, progs KubeadmPrograms, verb, config string) error {
	k := n.kubeadmFiles()
	if err := os.WriteFile(k.config, []byte(config), 0o644); err != nil {
		return err
	}
	name := "kubeadm-" + verb + "-" + n.Name
	logf, err := os.Create(c.net.LogPath(name))
	if err != nil {
		return err
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(ctx, kubeadmTimeout)
	defer cancel()
	argv := n.inNode("env", "PATH="+k.bin+":"+os.Getenv("PATH"), progs.Kubeadm, verb, "--config", k.config, "--v=1")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kubeadm %s: %w", verb, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	kubelet := false
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("kubeadm %s: %w%s", verb, err, c.net.LogTail(name))
			}
			if !kubelet {
				return fmt.Errorf("kubeadm %s ended before it wrote the kubelet's configuration%s", verb, c.net.LogTail(name))
			}
			return nil
		case <-tick.C:
			if kubelet {
				continue
			}
			env, err := os.ReadFile(filepath.Join(n.files().varlib, "kubelet", "kubeadm-flags.env"))
			if err != nil {
				continue
			}
			if _, err := os.Stat(filepath.Join(n.files().varlib, "kubelet", "config.yaml")); err != nil {
				continue
			}
			// kubeadm may be between creating the file and writing
			// it: an empty or partial file is read again at the next tick.
			args, err := kubeletArgs(string(env))
			if err != nil {
				continue
			}
			if _, _, err := c.net.Start(n.Kubelet, "", n.inNode(append([]string{progs.Kubelet}, args...)...), false); err != nil {
				return err
			}
			kubelet = true
		}
	}
}

// copyAdminKubeconfig copies kubeadm's admin.conf from n, the
// control-plane node, to the lab's admin kubeconfig (dst), where svclab
// kubectl and the lab's clients read it (they dial from inside the node).
func (n *Node) copyAdminKubeconfig(dst string) error {
	b, err := os.ReadFile(filepath.Join(n.kubeadmFiles().etcUpper, "kubernetes", "admin.conf"))
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// podNetwork is kindnetd's part: once kube-controller-manager has given
// each node its pod range, each node gets the bridge CNI configuration on
// it (the kubelet reports the node Ready once there is one) and routes to
// the other nodes' ranges.
func (c *Cluster) podNetwork(ctx context.Context, client kubernetes.Interface, nodes []*Node) error {
	err := c.poll(ctx, "the nodes' pod ranges", kubeadmTimeout, func() error {
		for _, n := range nodes {
			obj, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
			if obj.Spec.PodCIDR == "" {
				return fmt.Errorf("node %s: no spec.podCIDR yet", n.Name)
			}
			if n.PodCIDR, err = netip.ParsePrefix(obj.Spec.PodCIDR); err != nil {
				return fmt.Errorf("node %s: spec.podCIDR: %w", n.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, n := range nodes {
		f := n.files()
		if err := os.WriteFile(filepath.Join(f.cniDir, "10-svclab.conflist"), []byte(cniConfig(n.PodCIDR)), 0o644); err != nil {
			return err
		}
	}
	for _, argv := range podRouteCommands(nodes) {
		if err := topology.Run(ctx, argv...); err != nil {
			return err
		}
	}
	return nil
}

// waitKubeadm waits for every node to be Ready, then for kube-proxy's
// DaemonSet and CoreDNS's Deployment to have every pod Ready.
func (c *Cluster) waitKubeadm(ctx context.Context, client kubernetes.Interface, nodes []*Node) error {
	return c.poll(ctx, "the kubeadm cluster", kubeadmTimeout, func() error {
		for _, n := range nodes {
			node, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
			if !nodeReady(node) {
				return fmt.Errorf("node %s: not Ready", n.Name)
			}
		}
		ds, err := client.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.DesiredNumberScheduled != int32(len(nodes)) || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled ||
			ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled {
			return fmt.Errorf("daemonset kube-system/kube-proxy: %d of %d pods ready", ds.Status.NumberReady, len(nodes))
		}
		dep, err := client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !deploymentReady(dep) {
			return fmt.Errorf("deployment kube-system/coredns: %d of %d pods ready", dep.Status.ReadyReplicas, ptrOr(dep.Spec.Replicas, 1))
		}
		return nil
	})
}

// kubeadmFiles are the paths of what a kubeadm node has beyond any real
// node's files, all in its directory.
type kubeadmFiles struct {
	config  string // kubeadm's --config
	patches string // kubeadm's patches directory
	// etcUpper and etcWork are the overlay on the node's /etc: kubeadm
	// writes /etc/kubernetes into etcUpper, never on the machine's disk.
	etcUpper, etcWork string
	bin               string // on kubeadm's PATH: the kubelet
}

func (n *Node) kubeadmFiles() kubeadmFiles {
	d := n.Dir
	return kubeadmFiles{
		config:   filepath.Join(d, "kubeadm.yaml"),
		patches:  filepath.Join(d, "patches"),
		etcUpper: filepath.Join(d, "etc", "upper"),
		etcWork:  filepath.Join(d, "etc", "work"),
		bin:      filepath.Join(d, "bin"),
	}
}

// etcOverlay is the mount of the overlay on a kubeadm node's /etc: the
// machine's /etc below, the node's own above, where kubeadm writes
// /etc/kubernetes and where the node's hosts and resolv.conf are. (Its
// /usr/lib has the overlay every real node has on a machine without
// /lib/modules: mountCommands.)
func (k kubeadmFiles) etcOverlay() []string {
	return []string{"mount", "-t", "overlay", "overlay", "-o",
		"lowerdir=/etc,upperdir=" + k.etcUpper + ",workdir=" + k.etcWork, "/etc"}
}
