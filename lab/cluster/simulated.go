package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// tokenDuration is how long the ServiceAccount tokens of svcproxy and
// clusterdns last: longer than any lab is up.
const tokenDuration = "8760h"

// UpSimulated builds the control-plane lab once the state directory is
// there, in this order: the node and
// the client; etcd, kube-apiserver and kube-controller-manager in the node;
// deploy/lab (the RBAC and objects of deploy/base, with the lab's addresses)
// and cluster.yaml applied with kubectl; the kubelet, which starts the
// StatefulSets' pods; tokens for svcproxy's and clusterdns's ServiceAccounts;
// then clusterdns (with a mirror pod, so that kube-dns has it as its
// endpoint) and svcproxy, each once what it serves is there.
func (c *Cluster) UpSimulated(ctx context.Context, cp ControlPlane, dns, proxy, mode string) error {
	// The client and the outside host; the kubelet makes the pods.
	if err := c.net.Build(ctx, notPod); err != nil {
		return err
	}
	if err := c.startControlPlane(ctx, cp, false); err != nil {
		return err
	}
	if err := c.applyDeploy(ctx, "lab"); err != nil {
		return err
	}
	st, err := c.net.ReadState()
	if err != nil {
		return err
	}
	if err := c.syncLabConfigMap(ctx, mode, st.Offload); err != nil {
		return err
	}
	if _, err := c.KubectlOut(ctx, strings.NewReader(string(Objects)), "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	// The kubelet runs in the machine's own namespaces, as a kubelet does: in
	// the node's, `ip netns add` would pin each pod's namespace in the private
	// mount namespace `ip netns exec` gives, where no one else would see it.
	// It reaches the API server inside the node, as svclab does.
	if _, _, err := c.net.Start("kubelet", "", []string{c.self, "--state", c.net.StateDir(), "kubelet"}, false); err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(pkiDir(c.net.StateDir()), "ca.crt"))
	if err != nil {
		return err
	}
	for _, sa := range []string{"svcproxy", "clusterdns"} {
		tok, err := c.KubectlOut(ctx, nil, "-n", "kube-system", "create", "token", sa, "--duration="+tokenDuration)
		if err != nil {
			return err
		}
		user := "system:serviceaccount:kube-system:" + sa
		if err := writeKubeconfig(c.KubeconfigPath(sa), apiserverURL, caPEM, user, strings.TrimSpace(tok)); err != nil {
			return err
		}
	}
	kc, err := c.Client()
	if err != nil {
		return err
	}
	if err := waitLabEndpoints(ctx, kc); err != nil {
		return fmt.Errorf("%w%s", err, c.net.LogTail("kubelet"))
	}
	if err := c.daemons.startDNS(ctx, dns); err != nil {
		return err
	}
	k := NewSimulatedKubelet(SimulatedKubeletConfig{Net: c.net, Pods: c.pods, Client: kc})
	if err := k.createMirrorPod(ctx); err != nil {
		return err
	}
	if err := waitEndpoints(ctx, kc, "kube-system", "kube-dns", 1); err != nil {
		return fmt.Errorf("%w%s", err, c.net.LogTail("kubelet"))
	}
	return c.daemons.startProxy(ctx, proxy, mode)
}

// waitLabEndpoints waits until every Service of cluster.yaml that selects the
// pods of a StatefulSet has a ready endpoint per replica and IP family: the
// EndpointSlice controller has caught up on every Service, not only on web.
// Under load it can lag seconds behind on one of them (a sync that meets a
// stale cache is requeued with backoff), and a demo step about echo then saw
// one pod of three answer.
func waitLabEndpoints(ctx context.Context, kc kubernetes.Interface) error {
	sets, err := kc.AppsV1().StatefulSets(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	replicas := map[string]int{} // by the app label of the pods
	for _, ss := range sets.Items {
		replicas[ss.Spec.Template.Labels["app"]] = int(ptr.Deref(ss.Spec.Replicas, 1))
	}
	svcs, err := kc.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, svc := range svcs.Items {
		pods, ok := replicas[svc.Spec.Selector["app"]]
		if !ok {
			continue // no selector (kubernetes, frontend): no slices of the controller's
		}
		if err := waitEndpoints(ctx, kc, svc.Namespace, svc.Name, pods*max(1, len(svc.Spec.IPFamilies))); err != nil {
			return err
		}
	}
	return nil
}

// waitEndpoints waits until the EndpointSlices of Service ns/svc have n ready
// endpoints: the EndpointSlice controller has seen the pods Ready.
func waitEndpoints(ctx context.Context, kc kubernetes.Interface, ns, svc string, n int) error {
	deadline := time.Now().Add(ControlPlaneTimeout)
	for {
		got, err := readyEndpoints(ctx, kc, ns, svc)
		if err == nil && got == n {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("service %s/%s: %d ready endpoints after %s, want %d (%v)",
				ns, svc, got, ControlPlaneTimeout, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readyEndpoints counts the ready endpoints of a Service's EndpointSlices.
func readyEndpoints(ctx context.Context, c kubernetes.Interface, ns, svc string) (int, error) {
	slices, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				n++
			}
		}
	}
	return n, nil
}
