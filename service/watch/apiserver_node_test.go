package watch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// TestAPIServerNode runs a Watcher that names its node against a real
// kube-apiserver and follows that Node through its life: created with a zone
// label, relabelled, tainted by the cluster autoscaler, deleted while a
// finalizer holds it (so that its deletionTimestamp shows). Each change must
// show in the next Snapshot. Another Node, in another zone, must never be
// taken for this one (the watch selects metadata.name server-side).
func TestAPIServerNode(t *testing.T) {
	srv := kapitest.Start(t)
	api := srv.Client.CoreV1().Nodes()
	const finalizer = "svcproxy.io/test-holds-the-node"
	t.Cleanup(func() { // let the Node go, whatever step the test stopped at
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if n, err := api.Get(ctx, "node-a", metav1.GetOptions{}); err == nil && len(n.Finalizers) > 0 {
			n.Finalizers = nil
			_, _ = api.Update(ctx, n, metav1.UpdateOptions{})
		}
	})
	create := func(name, zone string, finalizers ...string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := api.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
				Name:       name,
				Labels:     map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: zone},
				Finalizers: finalizers,
			}}, metav1.CreateOptions{})
			return err
		}
	}
	update := func(name string, change func(*corev1.Node)) func(context.Context) error {
		return func(ctx context.Context) error {
			n, err := api.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(n)
			_, err = api.Update(ctx, n, metav1.UpdateOptions{})
			return err
		}
	}
	node := func(want string) func(*service.Snapshot) bool {
		return func(s *service.Snapshot) bool { return apiNode(s.Node()) == want }
	}

	// Another node exists before the watch starts, this one does not yet.
	if err := create("node-b", "zone-9")(t.Context()); err != nil {
		t.Fatal(err)
	}
	f := startAPIWatcherConfig(t, watch.Config{Kubeconfig: srv.Kubeconfig, NodeName: "node-a"})
	if got := apiNode(f.latest.Node()); got != "<none>" {
		t.Fatalf("first Snapshot: Node %s, want none (node-a does not exist, node-b is not this node)", got)
	}

	f.step(t, "create node-a in zone-1", create("node-a", "zone-1", finalizer),
		node("node-a zone=zone-1 deleting=false toBeDeleted=false"))
	f.step(t, "relabel node-a to zone-2", update("node-a", func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "zone-2" }),
		node("node-a zone=zone-2 deleting=false toBeDeleted=false"))
	// node-b's change comes first, node-a's second: the Snapshot that shows
	// node-a's must still show node-a.
	f.step(t, "relabel node-b, taint node-a", func(ctx context.Context) error {
		if err := update("node-b", func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "zone-8" })(ctx); err != nil {
			return err
		}
		return update("node-a", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{
				Key: service.TaintToBeDeletedByClusterAutoscaler, Value: "1764748800", Effect: corev1.TaintEffectNoSchedule})
		})(ctx)
	}, node("node-a zone=zone-2 deleting=false toBeDeleted=true"))
	f.step(t, "delete node-a (a finalizer holds it)", func(ctx context.Context) error {
		return api.Delete(ctx, "node-a", metav1.DeleteOptions{})
	}, node("node-a zone=zone-2 deleting=true toBeDeleted=true"))

	n, err := api.Get(t.Context(), "node-a", metav1.GetOptions{})
	if err != nil || n.DeletionTimestamp == nil {
		t.Fatalf("node-a after delete: %v, deletionTimestamp %v: want it held by its finalizer", err, n.GetDeletionTimestamp())
	}
	t.Logf("Snapshot latency per change (API call start to Snapshot):\n%s", f.latencies.String())
}

// apiNode prints what a Snapshot holds of this node: "<none>", or
// "node-a zone=zone-1 deleting=false toBeDeleted=false".
func apiNode(n *service.Node) string {
	if n == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s zone=%s deleting=%t toBeDeleted=%t", n.Name, n.Zone(), n.Deleting, n.ToBeDeleted)
}

// TestAPIServerTopology follows this node's zone from its Node through to the
// endpoints a PreferSameZone Service sends this node's traffic to: the slice's forZones hints arrive through the EndpointSlice
// informer, the zone through the Node informer, and Port.Categorize joins
// them. Moving the node to the other zone moves its traffic; a node without a
// zone label ignores zone hints (kube-proxy's topologyModeFromHints).
func TestAPIServerTopology(t *testing.T) {
	srv := kapitest.Start(t)
	ns := srv.Namespace(t)
	api := srv.Client
	f := startAPIWatcherConfig(t, watch.Config{Kubeconfig: srv.Kubeconfig, NodeName: "node-a", ProxiedOnly: true})
	webHTTP := service.PortName{NamespacedName: service.NamespacedName{Namespace: ns, Name: "web"}, Port: "http", Protocol: service.TCP}
	cluster := func(want string) func(*service.Snapshot) bool {
		return func(s *service.Snapshot) bool {
			p, ok := s.Port(webHTTP)
			return ok && apiEndpoints(p.Categorize("node-a", s.Node()).Cluster) == want
		}
	}
	setZone := func(zone string) func(context.Context) error {
		return func(ctx context.Context) error {
			n, err := api.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if zone == "" {
				delete(n.Labels, corev1.LabelTopologyZone)
			} else {
				n.Labels[corev1.LabelTopologyZone] = zone
			}
			_, err = api.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}
	}

	f.step(t, "node-a in zone-1, web PreferSameZone with a hinted endpoint per zone", func(ctx context.Context) error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
			Labels: map[string]string{corev1.LabelTopologyZone: "zone-1"}}}
		if _, err := api.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
		svc := apiSelectService("web", "198.18.0.10")
		svc.Spec.TrafficDistribution = new(corev1.ServiceTrafficDistributionPreferSameZone)
		if _, err := api.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return err
		}
		es := apiSelectSlice("web-1", "web", "198.19.0.1")
		es.Endpoints = nil
		for _, ep := range []struct{ ip, node, zone string }{{"198.19.0.1", "node-b", "zone-1"}, {"198.19.0.2", "node-c", "zone-2"}} {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{ep.ip}, NodeName: new(ep.node), Zone: new(ep.zone),
				Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
				Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: ep.zone}}},
			})
		}
		_, err := api.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{})
		return err
	}, cluster("198.19.0.1:8080"))
	f.step(t, "node-a moves to zone-2", setZone("zone-2"), cluster("198.19.0.2:8080"))
	f.step(t, "node-a loses its zone label", setZone(""), cluster("198.19.0.1:8080 198.19.0.2:8080"))
}
