package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/svcproxy/svcproxy/deploy"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// nodeReadyTimeout bounds the real node's start: containerd, the kubelet's
// registration, then svcproxy's and clusterdns's pods, each image unpacked
// and each probe passed. Seconds on an idle machine.
const nodeReadyTimeout = 4 * time.Minute

// schedulerAddr is kube-scheduler's health port, on the node's loopback.
const schedulerAddr = "127.0.0.1:10259"

// upRealNode builds the real-node lab: the node, client and outside
// namespaces; the control plane; kube-scheduler; the node's mount
// namespace; deploy/realnode applied (svcproxy's DaemonSet in mode, and
// clusterdns's Deployment); containerd, with the images imported; and the
// kubelet, which runs their pods. It returns once both are Ready.
func (l *Lab) upRealNode(ctx context.Context, cp ControlPlane, rn RealNode, mode string) error {
	if err := l.upNodeAndClient(ctx); err != nil {
		return err
	}
	if err := l.startControlPlane(ctx, cp, true); err != nil {
		return err
	}
	admin := l.KubeconfigPath("admin")
	sched, _, err := l.net.Start("kube-scheduler", l.cfg.Plan.Node.Name, []string{rn.Scheduler,
		"--kubeconfig=" + admin,
		"--authentication-kubeconfig=" + admin,
		"--authorization-kubeconfig=" + admin,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + portOf(schedulerAddr),
		"--profiling=false",
	}, false)
	if err != nil {
		return err
	}
	if err := l.net.Wait(ctx, "kube-scheduler", sched.Process.Pid, controlPlaneTimeout, 200*time.Millisecond, httpOK(l.nodeHTTPSInsecure(), "https://"+schedulerAddr+"/healthz", "")); err != nil {
		return err
	}
	// The objects first, svcproxy's mode in its ConfigMap, so that the pods
	// start with it once the kubelet registers the node.
	deployDir := filepath.Join(l.cfg.StateDir, "deploy")
	if err := deploy.WriteTo(deployDir); err != nil {
		return err
	}
	if _, err := l.kubectlOut(ctx, nil, "apply", "--server-side", "-k", filepath.Join(deployDir, "realnode")); err != nil {
		return err
	}
	if mode != "" {
		patch := fmt.Sprintf(`{"data":{"mode":%q}}`, mode)
		if _, err := l.kubectlOut(ctx, nil, "-n", "kube-system", "patch", "configmap", "svcproxy", "--type=merge", "-p", patch); err != nil {
			return err
		}
	}
	if err := l.startNodeRuntime(ctx, rn); err != nil {
		return err
	}
	c, err := l.Client()
	if err != nil {
		return err
	}
	return l.waitWorkloads(ctx, c)
}

// upNodeAndClient makes the node's namespace and the hosts that are not
// pods (the client, the outside host), with their routes and resolv.conf.
func (l *Lab) upNodeAndClient(ctx context.Context) error {
	return l.net.Build(ctx, func(h topology.Host) bool { return h.Role != topology.RolePod })
}

// startNodeRuntime writes the node's files, makes its mount namespace,
// starts containerd, imports the images, and starts the kubelet.
func (l *Lab) startNodeRuntime(ctx context.Context, rn RealNode) error {
	f := l.nodeFiles()
	if err := l.writeNodeFiles(f); err != nil {
		return err
	}
	if err := l.makeNodeMountNS(ctx, f); err != nil {
		return err
	}
	// Pods behind the bridge answer Services' clients over it; only with
	// br_netfilter do those replies pass the node's conntrack, which undoes
	// the DNAT (per network namespace on this kernel).
	if err := topology.Run(ctx, "ip", "netns", "exec", l.net.NodeNamespace(), "sysctl", "-qw",
		"net.bridge.bridge-nf-call-iptables=1", "net.bridge.bridge-nf-call-ip6tables=1"); err != nil {
		return err
	}
	ctrd, _, err := l.net.Start("containerd", "", l.inNode(containerdBin, "--config", f.containerd), false)
	if err != nil {
		return err
	}
	sock := filepath.Join(f.run, strings.TrimPrefix(containerdSocket, "/run/"))
	if err := l.net.Wait(ctx, "containerd", ctrd.Process.Pid, controlPlaneTimeout, 200*time.Millisecond, func(context.Context) error {
		return topology.Run(ctx, l.inNode(ctrBin, "--address", containerdSocket, "version")...)
	}); err != nil {
		return fmt.Errorf("%w (socket %s)", err, sock)
	}
	for _, img := range rn.Images {
		if err := topology.Run(ctx, l.inNode(ctrBin, "--address", containerdSocket, "-n", "k8s.io", "images", "import", "--all-platforms", img)...); err != nil {
			return fmt.Errorf("import %s: %w", img, err)
		}
	}
	p := l.cfg.Plan
	_, _, err = l.net.Start("kubelet", "", l.inNode(rn.Kubelet,
		"--config="+f.kubelet,
		"--kubeconfig="+f.kubeconfig,
		"--hostname-override="+p.Node.Name,
		// The node's address is on its links to the lab's hosts; the API
		// server reaches the kubelet there (--kubelet-preferred-address-types).
		"--node-ip="+p.Node.Addr.String(),
	), false)
	return err
}

// inNode is argv run in the node: its network namespace and the real
// node's mount namespace.
func (l *Lab) inNode(argv ...string) []string {
	return append([]string{"nsenter", "--mount=" + l.nodeFiles().pin, "--net=" + filepath.Join(topology.NetnsDir, l.net.NodeNamespace()), "--"}, argv...)
}

// writeNodeFiles writes the configuration of containerd, the kubelet and
// CNI, the sysctl files, and makes the directories the node's mount
// namespace binds, and the cgroup root in every hierarchy.
func (l *Lab) writeNodeFiles(f nodeFiles) error {
	p := l.cfg.Plan
	for _, d := range []string{f.run, f.varlib, f.varlog, f.cniDir, f.sysctls, filepath.Dir(f.pin)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if rel, ok := underRun(l.cfg.StateDir); ok {
		if err := os.MkdirAll(filepath.Join(f.run, rel), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		f.containerd: f.containerdConfig(),
		f.kubelet:    f.kubeletConfig(p),
		f.resolvConf: nodeResolvConf(p),
		filepath.Join(f.cniDir, "10-svclab.conflist"): cniConfig(p.PodCIDR),
	}
	for _, s := range kubeletSysctls {
		files[filepath.Join(f.sysctls, strings.ReplaceAll(s.name, "/", "."))] = s.value + "\n"
	}
	for path, body := range files {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return err
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(l.pkiDir(), "ca.crt"))
	if err != nil {
		return err
	}
	tok, err := os.ReadFile(filepath.Join(l.pkiDir(), "node.token"))
	if err != nil {
		return err
	}
	user := "system:node:" + p.Node.Name
	if err := writeKubeconfig(f.kubeconfig, apiserverURL, caPEM, user, strings.TrimSpace(string(tok))); err != nil {
		return err
	}
	for _, c := range l.net.Cgroups().Machine() {
		if err := os.MkdirAll(filepath.Join(c.Point, l.net.Cgroups().Name()), 0o755); err != nil {
			return fmt.Errorf("cgroup root: %w", err)
		}
	}
	return nil
}

// makeNodeMountNS makes the node's mount namespace and keeps it with a bind
// mount (the pin), as `ip netns add` keeps a network namespace: the pin's
// directory is a private mount of its own, or the kernel would refuse to
// keep a namespace there. Then the mounts of mountCommands, inside it.
func (l *Lab) makeNodeMountNS(ctx context.Context, f nodeFiles) error {
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
	for _, argv := range f.mountCommands(l.net.Cgroups().Machine(), l.cfg.StateDir) {
		if err := topology.Run(ctx, l.inNode(argv...)...); err != nil {
			return err
		}
	}
	return nil
}

// waitWorkloads waits for the node to be Ready, then for svcproxy's
// DaemonSet and clusterdns's Deployment to have every pod Ready.
func (l *Lab) waitWorkloads(ctx context.Context, c kubernetes.Interface) error {
	p := l.cfg.Plan
	return l.poll(ctx, "the real node's pods", nodeReadyTimeout, func() error {
		node, err := c.CoreV1().Nodes().Get(ctx, p.Node.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", p.Node.Name, err)
		}
		if !nodeReady(node) {
			return fmt.Errorf("node %s: not Ready", p.Node.Name)
		}
		ds, err := c.AppsV1().DaemonSets("kube-system").Get(ctx, "svcproxy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.DesiredNumberScheduled == 0 || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled {
			return fmt.Errorf("daemonset kube-system/svcproxy: %d of %d pods ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
		}
		dep, err := c.AppsV1().Deployments("kube-system").Get(ctx, "clusterdns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !deploymentReady(dep) {
			return fmt.Errorf("deployment kube-system/clusterdns: %d of %d pods ready", dep.Status.ReadyReplicas, ptrOr(dep.Spec.Replicas, 1))
		}
		return nil
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func deploymentReady(d *appsv1.Deployment) bool {
	want := ptrOr(d.Spec.Replicas, 1)
	return d.Status.ObservedGeneration >= d.Generation && d.Status.ReadyReplicas == want && d.Status.UpdatedReplicas == want
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// poll tries check every half second until it succeeds, ctx ends, or
// timeout passes; then the error says what was last seen, and the ends of
// the kubelet's and containerd's logs.
func (l *Lab) poll(ctx context.Context, what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %s: %w%s%s", what, timeout, err, l.net.LogTail("kubelet"), l.net.LogTail("containerd"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// PodNetNS is the network namespace of a pod that the real node runs, as a
// /proc/PID/ns/net path that nsenter and package nsenter take: that of a
// process in the pod's cgroup (its sandbox, or any of its containers; the
// kubelet's cgroupfs driver names the cgroup pod<UID>).
func (l *Lab) PodNetNS(uid string) (string, error) {
	want := "pod" + uid
	for _, d := range l.net.Cgroups().Dirs() {
		if filepath.Base(d) != want {
			continue
		}
		if pids := topology.TreePids(d); len(pids) > 0 {
			return fmt.Sprintf("/proc/%d/ns/net", pids[0]), nil
		}
	}
	return "", fmt.Errorf("pod %s: no process in a cgroup %s under /%s", uid, want, topology.CgroupRoot)
}

// setRealNodeMode switches the real node's svcproxy to mode as one would on
// kind (docs/kind.md): the ConfigMap's mode, then a rollout of the
// DaemonSet, whose new pod first cleans up after the old one.
func (l *Lab) setRealNodeMode(ctx context.Context, mode string) error {
	patch := fmt.Sprintf(`{"data":{"mode":%q}}`, mode)
	for _, args := range [][]string{
		{"-n", "kube-system", "patch", "configmap", "svcproxy", "--type=merge", "-p", patch},
		{"-n", "kube-system", "rollout", "restart", "daemonset/svcproxy"},
		{"-n", "kube-system", "rollout", "status", "daemonset/svcproxy", "--timeout=" + nodeReadyTimeout.String()},
	} {
		if _, err := l.kubectlOut(ctx, nil, args...); err != nil {
			return err
		}
	}
	// The pod is Ready once started (the DaemonSet has no readiness
	// probe): wait until the new svcproxy serves its metrics, where `svclab
	// mode` asks which mode runs.
	return l.poll(ctx, "svcproxy's new pod", nodeReadyTimeout, func() error {
		_, err := l.NodeGet(ctx, "/proxyMode")
		return err
	})
}
