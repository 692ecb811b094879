package cluster

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// What serves Services and DNS on the kubeadm cluster, and how `svclab
// use` changes it: as an operator would, through the API server, by the
// image of kubeadm's own kube-proxy DaemonSet and coredns Deployment. Their
// commands, arguments, ConfigMaps and RBAC stay kubeadm's: svcproxy reads
// kube-proxy's command line and KubeProxyConfiguration, clusterdns reads
// CoreDNS's -conf and Corefile.

// The two choices of each, and the image each means.
var (
	proxyImages = map[string]string{"kube-proxy": images.KubeProxyRef, "svcproxy": image.DefaultRef}
	dnsImages   = map[string]string{"coredns": images.CoreDNSRef, "clusterdns": image.ClusterDNSRef}
)

// Use makes what (svcproxy or kube-proxy, clusterdns or coredns) serve on
// the kubeadm cluster: `kubectl set image` on kube-proxy's DaemonSet or
// coredns's Deployment, then waits as `kubectl rollout status` does (and
// fails at once when a new pod cannot start), each pod replaced
// in turn as a rolling update does. Services keep answering meanwhile on
// every node but the one whose pod is being replaced (a DaemonSet's
// rolling update stops the old pod before it starts the new one).
// Then, as an operator does once another proxy has replaced one, the
// replaced proxy's cleanup runs in every node: kubeProxy (the kube-proxy
// program, FindKubeProxy) --cleanup for svcproxy, svcproxy --cleanup for
// kube-proxy.
func (c *Cluster) Use(ctx context.Context, what, kubeProxy string) error {
	st, err := c.net.ReadState()
	if err != nil {
		return err
	}
	if st.Nodes == 0 {
		return errors.New("svclab use: the lab runs no kubeadm cluster (svclab up --nodes N)")
	}
	kind, name, container, selector := "daemonset", "kube-proxy", "kube-proxy", "k8s-app=kube-proxy"
	ref, ok := proxyImages[what]
	if !ok {
		kind, name, container, selector = "deployment", "coredns", "coredns", "k8s-app=kube-dns"
		if ref, ok = dnsImages[what]; !ok {
			return fmt.Errorf("svclab use %q: want svcproxy or kube-proxy (Services), clusterdns or coredns (DNS)", what)
		}
	}
	if what == "kube-proxy" && !slices.Contains(KubeProxyModes, st.Mode) {
		return fmt.Errorf("svclab use kube-proxy: kube-proxy's ConfigMap says mode %q, which is svcproxy's own; kube-proxy would not start (svclab mode iptables first)", st.Mode)
	}
	if what == "kube-proxy" {
		// kube-proxy has no --socklb-* flags: what socklb mode added to the
		// DaemonSet goes (setKubeadmMode takes it away when the mode
		// changes; this is for a switch that stopped half way).
		if _, err := c.setProxySocketLB(ctx, false); err != nil {
			return err
		}
	}
	if _, err := c.KubectlOut(ctx, nil, "-n", "kube-system", "set", "image", kind+"/"+name, container+"="+ref); err != nil {
		return err
	}
	if err := c.waitRollout(ctx, kind+"/"+name, selector); err != nil {
		return err
	}
	switch what {
	case "kube-proxy":
		bin, err := c.net.Binary("svcproxy")
		if err != nil {
			return err
		}
		if err := c.cleanupEveryNode(ctx, bin); err != nil {
			return err
		}
	case "svcproxy":
		if err := c.cleanupEveryNode(ctx, kubeProxy); err != nil {
			return err
		}
	}
	if kind == "daemonset" {
		return c.waitProxyMode(ctx, st.Mode)
	}
	return nil
}

// cleanupEveryNode runs `PROXY --cleanup` in every node, once the other
// proxy serves there, as an operator runs the replaced proxy's cleanup
// (`kube-proxy --cleanup` on each node) when another proxy takes over.
// Neither proxy removes its rules when it stops (a restart adopts them),
// and kube-proxy removes only its own other modes' at its start. Left
// there, the replaced proxy's rules go on sending a Service's traffic to
// the endpoints it last saw, for every endpoint that has changed since:
// kube-proxy's iptables hooks come before svcproxy's userspace portals,
// and svcproxy's iptables hooks before kube-proxy's.
func (c *Cluster) cleanupEveryNode(ctx context.Context, proxy string) error {
	for _, n := range c.Nodes() {
		if err := topology.Run(ctx, "ip", "netns", "exec", n.Namespace, proxy, "--cleanup"); err != nil {
			return fmt.Errorf("node %s: the replaced proxy's rules: %w", n.Name, err)
		}
	}
	return nil
}

// Serving says which of each serves now, by the images of kube-proxy's
// DaemonSet and coredns's Deployment: "svcproxy" or "kube-proxy",
// "clusterdns" or "coredns" ("" where it cannot tell).
func (c *Cluster) Serving(ctx context.Context) (proxy, dns string, err error) {
	client, err := c.Client()
	if err != nil {
		return "", "", err
	}
	ds, err := client.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	dep, err := client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	return which(proxyImages, ds.Spec.Template.Spec.Containers[0].Image), which(dnsImages, dep.Spec.Template.Spec.Containers[0].Image), nil
}

func which(choices map[string]string, ref string) string {
	for name, r := range choices {
		if r == ref {
			return name
		}
	}
	return ""
}

// modeLine is the mode line of kube-proxy's config.conf, as kubeadm writes
// it (a KubeProxyConfiguration in YAML: one top-level "mode:").
var modeLine = regexp.MustCompile(`(?m)^mode: *.*$`)

// setKubeadmMode changes the proxy's mode as kubeadm's users do: the mode
// in the kube-proxy ConfigMap's config.conf, then `kubectl delete pods -l
// k8s-app=kube-proxy`; the DaemonSet makes new pods, which read the new
// mode. kube-proxy takes iptables, nftables and ipvs; svcproxy its own
// modes too. socklb also needs the DaemonSet's pods to see the node's
// cgroup2 hierarchy and bpffs (kubeadmsocklb.go): that change of the pod
// template rolls the pods by itself, in place of the delete, and another
// mode takes it away again, once socklb's pins are removed in every node.
// It says which of these it did.
func (c *Cluster) setKubeadmMode(ctx context.Context, mode string) (ModeChange, error) {
	proxy, _, err := c.Serving(ctx)
	if err != nil {
		return ModeChange{}, err
	}
	if proxy != "svcproxy" && !slices.Contains(KubeProxyModes, mode) {
		return ModeChange{}, fmt.Errorf("mode %s: svcproxy's own mode, and kube-proxy serves (svclab use svcproxy first)", mode)
	}
	hadSocketLB, err := c.proxyHasSocketLB(ctx)
	if err != nil {
		return ModeChange{}, err
	}
	if hadSocketLB && mode != "socklb" {
		if err := c.removeSocketLBEveryNode(ctx); err != nil {
			return ModeChange{}, err
		}
	}
	client, err := c.Client()
	if err != nil {
		return ModeChange{}, err
	}
	cms := client.CoreV1().ConfigMaps("kube-system")
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		conf := cm.Data["config.conf"]
		if !modeLine.MatchString(conf) {
			return errors.New("configmap kube-system/kube-proxy: config.conf has no mode line")
		}
		cm.Data["config.conf"] = modeLine.ReplaceAllString(conf, "mode: "+mode)
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return ModeChange{}, err
	}
	rolled, err := c.setProxySocketLB(ctx, mode == "socklb")
	if err != nil {
		return ModeChange{}, err
	}
	change := modeChange(proxy, mode, hadSocketLB, rolled)
	if rolled {
		if err := c.waitRollout(ctx, "daemonset/kube-proxy", "k8s-app=kube-proxy"); err != nil {
			return ModeChange{}, err
		}
	} else if _, err := c.KubectlOut(ctx, nil, "-n", "kube-system", "delete", "pods", "-l", "k8s-app=kube-proxy"); err != nil {
		return ModeChange{}, err
	}
	if err := c.waitProxyMode(ctx, mode); err != nil {
		return ModeChange{}, err
	}
	return change, nil
}

// ModeChange says what `svclab mode` did on the kubeadm cluster, for its
// message: it always edits the kube-proxy ConfigMap's mode; then either it
// deleted the DaemonSet's pods, which the DaemonSet made anew, or the pod
// template changed (socklb's volumes and flags added or taken away) and
// the DaemonSet replaced its pods by itself, a rolling update, one node
// at a time: nothing was deleted.
type ModeChange struct {
	// Proxy is what serves ("svcproxy" or "kube-proxy"), Mode its mode now.
	Proxy, Mode string
	// SocketLB is "added" when the pod template got what the socket LB
	// needs, "removed" when that was taken away; "" when the template did
	// not change and the pods were deleted.
	SocketLB string
	// PinsRemoved says socklb's pins were removed in every node first
	// (svcproxy --cleanup with the pin path), leaving socklb mode.
	PinsRemoved bool
}

// modeChange is what setKubeadmMode did, switching proxy to mode: had
// says the DaemonSet had socklb's volumes and flags before, rolled that its
// pod template changed (setProxySocketLB).
func modeChange(proxy, mode string, had, rolled bool) ModeChange {
	m := ModeChange{Proxy: proxy, Mode: mode, PinsRemoved: had && mode != "socklb"}
	switch {
	case rolled && mode == "socklb":
		m.SocketLB = "added"
	case rolled:
		m.SocketLB = "removed"
	}
	return m
}

// String is `svclab mode`'s line on the kubeadm cluster: each step, in
// the order it was taken.
func (m ModeChange) String() string {
	steps := []string{"configmap kube-system/kube-proxy's mode edited"}
	if m.PinsRemoved {
		steps = append(steps, "socklb's pins removed in every node (svcproxy --cleanup --socklb-pin-path)")
	}
	rolled := "the DaemonSet replaced its pods, one node at a time: none deleted"
	switch m.SocketLB {
	case "added":
		steps = append(steps, "daemonset kube-system/kube-proxy's pod template given the node's cgroup2 hierarchy and bpffs, --socklb-cgroup and --socklb-pin-path", rolled)
	case "removed":
		steps = append(steps, "daemonset kube-system/kube-proxy's pod template back to kubeadm's", rolled)
	default:
		steps = append(steps, "its pods deleted, and made anew by daemonset kube-system/kube-proxy")
	}
	return fmt.Sprintf("%s runs in %s mode on every node (%s)", m.Proxy, m.Mode, strings.Join(steps, "; "))
}

// failingPod says which pod of kube-system matching selector will not
// serve by itself, and why: one that has exited since it started, with the
// end of what it said (kube-proxy in ipvs mode on a kernel without IPVS
// exits, and the kubelet restarts it in a loop), or one whose image the
// node does not have (nothing is pulled here). "" for none.
func (c *Cluster) failingPod(ctx context.Context, selector string) string {
	client, err := c.Client()
	if err != nil {
		return ""
	}
	pods, err := client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return ""
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && slices.Contains(imageFailures, w.Reason) {
				return fmt.Sprintf("pod %s on %s: %s: %s", p.Name, p.Spec.NodeName, w.Reason, w.Message)
			}
			if cs.RestartCount == 0 && cs.LastTerminationState.Terminated == nil {
				continue
			}
			return fmt.Sprintf("pod %s on %s exited (restarted %d times); its last words:\n%s", p.Name, p.Spec.NodeName, cs.RestartCount, c.lastWords(ctx, p.Name, cs.State.Running != nil))
		}
	}
	return ""
}

// lastWords is the end of what pod's container said before it exited:
// the previous container's log, or the current one's when the kubelet has
// already removed the previous container (it keeps one dead container a
// pod, so a container that exited twice may have taken the first one's log
// with it: the kubelet then answers "unable to retrieve container logs").
// A current container that is not running (it exited, or waits in the
// restart loop's back-off) has said the same; one that runs may not have
// said it yet, so running says not to read it.
func (c *Cluster) lastWords(ctx context.Context, pod string, running bool) string {
	sources := [][]string{{"--previous"}}
	if !running {
		sources = append(sources, nil)
	}
	var said string
	for try := 0; try < 3; try++ {
		for _, flags := range sources {
			args := append([]string{"-n", "kube-system", "logs", pod, "--tail=3"}, flags...)
			out, err := c.KubectlOut(ctx, nil, args...)
			said = strings.TrimSpace(out)
			if err == nil && said != "" && !strings.HasPrefix(said, "unable to retrieve container logs") {
				return said
			}
		}
		select {
		case <-ctx.Done():
			return said
		case <-time.After(time.Second):
		}
	}
	return said
}

// imageFailures are the reasons a container waits for an image that will
// not come.
var imageFailures = []string{"ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"}

// waitRollout waits until workload (kind/name in kube-system) has rolled
// out, as `kubectl rollout status` does, and gives up at once when one of
// its pods (selector) fails.
func (c *Cluster) waitRollout(ctx context.Context, workload, selector string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	err := c.poll(ctx, workload+" rolled out", kubeadmTimeout, func() error {
		if why := c.failingPod(ctx, selector); why != "" {
			cancel(errors.New(why))
		}
		out, err := c.KubectlOut(ctx, nil, "-n", "kube-system", "rollout", "status", workload, "--watch=false")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "successfully rolled out") {
			return errors.New(strings.TrimSpace(out))
		}
		return nil
	})
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("%s: %w", workload, cause)
	}
	return err
}

// waitProxyMode waits until the proxy on every node answers /proxyMode
// with mode, and gives up at once when a proxy pod exits.
func (c *Cluster) waitProxyMode(ctx context.Context, mode string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	err := c.poll(ctx, "the proxy on every node in mode "+mode, kubeadmTimeout, func() error {
		if why := c.failingPod(ctx, "k8s-app=kube-proxy"); why != "" {
			cancel(errors.New(why))
		}
		for _, n := range c.Nodes() {
			got, err := n.MetricsGet(ctx, "/proxyMode")
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
			if strings.TrimSpace(got) != mode {
				return fmt.Errorf("node %s: /proxyMode says %q", n.Name, strings.TrimSpace(got))
			}
		}
		return nil
	})
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("the proxy in mode %s: %w", mode, cause)
	}
	return err
}

// MetricsGet fetches path from the metrics server of the proxy on n
// (kube-proxy's or svcproxy's, both at MetricsAddr), from inside n.
func (n *Node) MetricsGet(ctx context.Context, path string) (string, error) {
	return metricsGet(ctx, httpIn(n.Namespace), path)
}
