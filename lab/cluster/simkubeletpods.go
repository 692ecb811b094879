package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/util/retry"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// The simulated kubelet's pods: the host each gets, and the status it reports.

// claim gives a pod its lab host, and records it as running: the Plan's host,
// for the pods it names, or a new one with the lowest free address of PodPool.
func (k *SimulatedKubelet) claim(pod *corev1.Pod) (topology.Host, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	name := podHostName(pod.Namespace, pod.Name)
	h, ok := k.net.Plan().Host(name)
	if !ok || h.Role != topology.RolePod {
		addr, err := k.freeAddr()
		if err != nil {
			return topology.Host{}, err
		}
		h = topology.Host{Name: name, Role: topology.RolePod, Addr: addr, Addr6: k.net.Plan().IPv6Of(addr), NodeLink: nodeLinkName(name)}
	}
	k.running[name] = pod.UID
	k.addrs[name] = h.Addr
	h.TCP, h.UDP = nil, nil
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			port := uint16(p.ContainerPort)
			switch p.Protocol {
			case corev1.ProtocolUDP:
				if !slices.Contains(h.UDP, port) {
					h.UDP = append(h.UDP, port)
				}
			case corev1.ProtocolTCP, "":
				if !slices.Contains(h.TCP, port) {
					h.TCP = append(h.TCP, port)
				}
			}
		}
	}
	return h, nil
}

// freeAddr is the lowest address of PodPool, from .10, that no running pod
// has. The caller holds k.mu.
func (k *SimulatedKubelet) freeAddr() (netip.Addr, error) {
	used := map[netip.Addr]bool{}
	for _, a := range k.addrs {
		used[a] = true
	}
	for a := topology.PodPool.Addr().Next(); topology.PodPool.Contains(a); a = a.Next() {
		if a.As4()[3] >= 10 && !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address in %s", topology.PodPool)
}

// nodeLinkName is the node's end of a pod's veth pair: "veth-web-3", or, for
// a name too long for an interface (15 bytes), "veth" and a hash of it.
func nodeLinkName(host string) string {
	if n := "veth-" + host; len(n) <= 15 {
		return n
	}
	sum := sha256.Sum256([]byte(host))
	return "veth" + hex.EncodeToString(sum[:])[:11]
}

// reportRunning writes what the kubelet reports once a pod's containers run:
// phase Running, the pod's and the node's addresses, and every condition true.
func (k *SimulatedKubelet) reportRunning(ctx context.Context, pod *corev1.Pod, h topology.Host) error {
	now := metav1.Now()
	node := k.net.Plan().Node
	hostIPs := []corev1.HostIP{{IP: node.Addr.String()}}
	podIPs := []corev1.PodIP{{IP: h.Addr.String()}}
	// Dual-stack, as a kubelet with a node IP of each family reports: the
	// first family's address first, then the other's.
	if node.Addr6.IsValid() {
		hostIPs = append(hostIPs, corev1.HostIP{IP: node.Addr6.String()})
	}
	if h.Addr6.IsValid() {
		podIPs = append(podIPs, corev1.PodIP{IP: h.Addr6.String()})
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return nil // replaced meanwhile; its own sync follows
		}
		s := &cur.Status
		s.Phase = corev1.PodRunning
		s.HostIP, s.HostIPs = hostIPs[0].IP, hostIPs
		s.PodIP, s.PodIPs = podIPs[0].IP, podIPs
		s.StartTime = &now
		for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers,
			corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			setCondition(s, t, corev1.ConditionTrue, now)
		}
		s.ContainerStatuses = nil
		for _, c := range cur.Spec.Containers {
			s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, Ready: true, Started: new(true),
				ContainerID: "svclab://" + h.Name,
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
		_, err = k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// setCondition sets one condition of a pod's status, keeping its transition
// time when the status does not change.
func setCondition(s *corev1.PodStatus, t corev1.PodConditionType, status corev1.ConditionStatus, now metav1.Time) {
	for i := range s.Conditions {
		if c := &s.Conditions[i]; c.Type == t {
			if c.Status != status {
				c.Status, c.LastTransitionTime = status, now
			}
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: now})
}

// SetReady sets a pod's Ready condition (and ContainersReady, and its
// containers' ready flags) through the API, as the kubelet does when a
// readiness probe changes its mind: `svclab pod web-1 --ready=false`.
func (c *Cluster) SetReady(ctx context.Context, namespace, name string, ready bool) error {
	kc, err := c.Client()
	if err != nil {
		return err
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := kc.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s/%s: phase %s: only a running pod's readiness can change", namespace, name, pod.Status.Phase)
		}
		now := metav1.Now()
		setCondition(&pod.Status, corev1.ContainersReady, status, now)
		setCondition(&pod.Status, corev1.PodReady, status, now)
		for i := range pod.Status.ContainerStatuses {
			pod.Status.ContainerStatuses[i].Ready = ready
		}
		_, err = kc.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

// createMirrorPod writes the Pod that stands for clusterdns in the API, as
// the kubelet writes a mirror pod for each static pod it runs (kubeadm's
// control plane is static pods): clusterdns runs on the node's network with
// CoreDNS's label, so the Service kube-dns selects it and the EndpointSlice
// controller gives kube-dns its address.
func (k *SimulatedKubelet) createMirrorPod(ctx context.Context) error {
	p := k.net.Plan()
	kc := k.client
	node, err := kc.CoreV1().Nodes().Get(ctx, p.Node.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("mirror pod: node %s: %w", p.Node.Name, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "clusterdns-" + p.Node.Name,
			Namespace: "kube-system",
			Labels:    map[string]string{"k8s-app": "kube-dns"},
			Annotations: map[string]string{
				corev1.MirrorPodAnnotationKey: "svclab",
				"kubernetes.io/config.source": "file",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: new(true),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:    p.Node.Name,
			HostNetwork: true,
			Containers: []corev1.Container{{
				Name:  "clusterdns",
				Image: "svcproxy.test/svcproxy:dev",
				Ports: []corev1.ContainerPort{
					{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
					{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
				},
			}},
		},
	}
	created, err := kc.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = kc.CoreV1().Pods("kube-system").Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("mirror pod kube-system/%s: %w", pod.Name, err)
	}
	return k.reportRunning(ctx, created, p.Node)
}
