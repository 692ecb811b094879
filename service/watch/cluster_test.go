package watch_test

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// TestAPIServerNamespacesAndPods runs a Watcher with Namespaces and Pods
// against a real kube-apiserver: a namespace created and deleted, a pod that
// gets an address and then finishes, each in the next Snapshot. A pod's
// update that keeps its address (a label) changes nothing in it.
func TestAPIServerNamespacesAndPods(t *testing.T) {
	srv := kapitest.Start(t)
	core := srv.Client.CoreV1()
	f := startAPIWatcherConfig(t, watch.Config{Kubeconfig: srv.Kubeconfig, Namespaces: true, Pods: true})
	if ns := f.latest.Namespaces(); !ns.Has("default") || !ns.Has("kube-system") || ns.Has("team-a") {
		t.Fatalf("first Snapshot: namespaces %v, want default and kube-system, not team-a", ns)
	}
	ip := netip.MustParseAddr("198.19.0.7")
	hasPod := func(want bool) func(*service.Snapshot) bool {
		return func(s *service.Snapshot) bool { return s.PodIPs().Has(ip, "team-a") == want }
	}
	f.step(t, "create namespace team-a", func(ctx context.Context) error {
		_, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{})
		return err
	}, func(s *service.Snapshot) bool { return s.Namespaces().Has("team-a") })
	f.step(t, "a pod in team-a gets 198.19.0.7", func(ctx context.Context) error {
		// No controller makes the namespace's default ServiceAccount, which
		// admission wants a pod to have.
		if _, err := core.ServiceAccounts("team-a").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
			metav1.CreateOptions{}); err != nil {
			return err
		}
		pod, err := core.Pods("team-a").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-0"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}}
		_, err = core.Pods("team-a").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	}, hasPod(true))
	f.step(t, "the pod succeeds", func(ctx context.Context) error {
		pod, err := core.Pods("team-a").Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodSucceeded
		_, err = core.Pods("team-a").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	}, hasPod(false))
	f.step(t, "delete namespace team-a", func(ctx context.Context) error {
		// No namespace controller runs: the Namespace goes once its
		// finalizer is taken off, as the controller would.
		if err := core.Namespaces().Delete(ctx, "team-a", metav1.DeleteOptions{}); err != nil {
			return err
		}
		ns, err := core.Namespaces().Get(ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ns.Spec.Finalizers = nil
		_, err = core.Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
		return err
	}, func(s *service.Snapshot) bool { return !s.Namespaces().Has("team-a") })
}
