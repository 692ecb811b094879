package cluster

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

	"github.com/svcproxy/svcproxy/internal/k8sbin"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// NodePrograms are the programs and images of a real node (`svclab up
// --kubelet`): a kubelet and kube-scheduler of the control plane's version,
// and the image archives containerd imports, since it pulls nothing. The
// container runtime is the machine's: containerd, runc and the CNI plugins
// of Debian's packages (scripts/install-deps.sh).
type NodePrograms struct {
	Kubelet, Scheduler string
	// Runc is the runc the node's containerd runs: runc-capbound beside the
	// images when it is there (`go build -o bin/ ./cmd/...` builds it), so
	// that a privileged pod starts on a machine that withholds a capability
	// (docs/kind.md); "" is the machine's runc.
	Runc string
	// Images are image archives, imported with `ctr images import`:
	// svcproxy's (`make image`: bin/svcproxy-image.tar) and those of `make
	// e2e-images` (bin/e2e-images/*.tar), the pause image among them.
	Images []string
}

// The machine's runtime, from Debian's packages containerd, runc and
// containernetworking-plugins.
const (
	containerdBin = "/usr/bin/containerd"
	ctrBin        = "/usr/bin/ctr"
	cniBinDir     = "/usr/lib/cni"
)

// NodeTools are the programs a real node needs besides its own.
var NodeTools = []string{containerdBin, ctrBin, "runc", "nsenter", "unshare", "mount", "umount",
	filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"),
	filepath.Join(cniBinDir, "loopback"), filepath.Join(cniBinDir, "portmap")}

// FindNodePrograms returns a real node's programs: kubelet and kube-scheduler
// in dir, or, when dir is "", those `make node-bins` built and cached for the
// svcproxy repository around the working directory; and its images in
// imageDir (where `make image` and `make e2e-images` write them). It builds
// nothing.
func FindNodePrograms(dir, imageDir string) (NodePrograms, error) {
	progs := NodePrograms{Kubelet: filepath.Join(dir, "kubelet"), Scheduler: filepath.Join(dir, "kube-scheduler")}
	if dir == "" {
		bins, err := k8sbin.Build(context.Background(), k8sbin.Config{CachedOnly: true, ControlPlane: true, Node: true})
		if err != nil {
			return NodePrograms{}, fmt.Errorf("real node: %w; build them with `make node-bins` (minutes, once per machine)", err)
		}
		progs.Kubelet, progs.Scheduler = bins.Kubelet, bins.Scheduler
	}
	for _, p := range []string{progs.Kubelet, progs.Scheduler} {
		if _, err := os.Stat(p); err != nil {
			return NodePrograms{}, fmt.Errorf("real node: %w", err)
		}
	}
	svcproxy := filepath.Join(imageDir, "svcproxy-image.tar")
	if _, err := os.Stat(svcproxy); err != nil {
		return NodePrograms{}, fmt.Errorf("real node: %w; build the image with `make image`", err)
	}
	pause := filepath.Join(imageDir, "e2e-images", "pause.tar")
	if _, err := os.Stat(pause); err != nil {
		return NodePrograms{}, fmt.Errorf("real node: the pause image: %w; build it with `make e2e-images`", err)
	}
	others, _ := filepath.Glob(filepath.Join(imageDir, "e2e-images", "*.tar"))
	if capbound := filepath.Join(imageDir, "runc-capbound"); isFile(capbound) {
		progs.Runc = capbound
	}
	progs.Images = []string{svcproxy, pause}
	for _, f := range others {
		if f != pause {
			progs.Images = append(progs.Images, f)
		}
	}
	return progs, nil
}

// nodeReadyTimeout bounds the real node's start: containerd, the kubelet's
// registration, then svcproxy's and clusterdns's pods, each image unpacked
// and each probe passed. Seconds on an idle machine.
const nodeReadyTimeout = 4 * time.Minute

// schedulerAddr is kube-scheduler's health port, on the node's loopback.
const schedulerAddr = "127.0.0.1:10259"

// UpRealNode builds the real-node lab, once the state directory is there: the node, client and outside
// namespaces; the control plane; kube-scheduler; the node's mount
// namespace; deploy/realnode applied (svcproxy's DaemonSet in mode, and
// clusterdns's Deployment); containerd, with the images imported; and the
// kubelet, which runs their pods. It returns once both are Ready.
func (c *Cluster) UpRealNode(ctx context.Context, cp ControlPlane, progs NodePrograms, mode string) error {
	if err := c.net.Build(ctx, notPod); err != nil {
		return err
	}
	if err := c.startControlPlane(ctx, cp, true); err != nil {
		return err
	}
	admin := c.KubeconfigPath("admin")
	sched, _, err := c.net.Start("kube-scheduler", c.net.Plan().Node.Name, []string{progs.Scheduler,
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
	if err := c.net.Wait(ctx, "kube-scheduler", sched.Process.Pid, ControlPlaneTimeout, 200*time.Millisecond, httpOK(nodeHTTPSInsecure(c.net), "https://"+schedulerAddr+"/healthz", "")); err != nil {
		return err
	}
	// The objects first, svcproxy's mode in its ConfigMap, so that the pods
	// start with it once the kubelet registers the node.
	if err := c.applyDeploy(ctx, "realnode"); err != nil {
		return err
	}
	if mode != "" {
		patch := fmt.Sprintf(`{"data":{"mode":%q}}`, mode)
		if _, err := c.KubectlOut(ctx, nil, "-n", "kube-system", "patch", "configmap", "svcproxy", "--type=merge", "-p", patch); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes() {
		if err := n.start(ctx, c.net, progs); err != nil {
			return err
		}
	}
	kc, err := c.Client()
	if err != nil {
		return err
	}
	return c.waitWorkloads(ctx, kc)
}

// notPod selects, for topology.Net.Build, the node's namespace and the
// hosts that are not pods (the client, the outside host): where a
// kubelet, simulated or real, makes the pods.
func notPod(h topology.Host) bool { return h.Role != topology.RolePod }

// waitWorkloads waits for the nodes to be Ready, then for svcproxy's
// DaemonSet and clusterdns's Deployment to have every pod Ready.
func (c *Cluster) waitWorkloads(ctx context.Context, kc kubernetes.Interface) error {
	return c.poll(ctx, "the real node's pods", nodeReadyTimeout, func() error {
		for _, n := range c.Nodes() {
			node, err := kc.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
			if !nodeReady(node) {
				return fmt.Errorf("node %s: not Ready", n.Name)
			}
		}
		ds, err := kc.AppsV1().DaemonSets("kube-system").Get(ctx, "svcproxy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.DesiredNumberScheduled == 0 || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled {
			return fmt.Errorf("daemonset kube-system/svcproxy: %d of %d pods ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
		}
		dep, err := kc.AppsV1().Deployments("kube-system").Get(ctx, "clusterdns", metav1.GetOptions{})
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
// each node's kubelet's and containerd's logs.
func (c *Cluster) poll(ctx context.Context, what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, n := range c.Nodes() {
				logs.WriteString(c.net.LogTail(n.Kubelet) + c.net.LogTail(n.Containerd))
			}
			return fmt.Errorf("%s: not ready after %s: %w%s", what, timeout, err, logs.String())
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
func (c *Cluster) PodNetNS(uid string) (string, error) {
	want := "pod" + uid
	for _, d := range c.net.Cgroups().Dirs() {
		if filepath.Base(d) != want {
			continue
		}
		if pids := topology.TreePids(d); len(pids) > 0 {
			return fmt.Sprintf("/proc/%d/ns/net", pids[0]), nil
		}
	}
	return "", fmt.Errorf("pod %s: no process in a cgroup %s under /%s", uid, want, c.net.Cgroups().Name())
}

// setRealNodeMode switches the real node's svcproxy to mode as one would on
// kind (docs/kind.md): the ConfigMap's mode, then a rollout of the
// DaemonSet, whose new pod first cleans up after the old one.
func (c *Cluster) setRealNodeMode(ctx context.Context, mode string) error {
	patch := fmt.Sprintf(`{"data":{"mode":%q}}`, mode)
	for _, args := range [][]string{
		{"-n", "kube-system", "patch", "configmap", "svcproxy", "--type=merge", "-p", patch},
		{"-n", "kube-system", "rollout", "restart", "daemonset/svcproxy"},
		{"-n", "kube-system", "rollout", "status", "daemonset/svcproxy", "--timeout=" + nodeReadyTimeout.String()},
	} {
		if _, err := c.KubectlOut(ctx, nil, args...); err != nil {
			return err
		}
	}
	// The pod is Ready once started (the DaemonSet has no readiness
	// probe): wait until the new svcproxy serves its metrics, where `svclab
	// mode` asks which mode runs.
	return c.poll(ctx, "svcproxy's new pod", nodeReadyTimeout, func() error {
		_, err := c.daemons.NodeGet(ctx, "/proxyMode")
		return err
	})
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
