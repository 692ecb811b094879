package watch_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// TestAPIServerProxiedOnly runs svcproxy's Watcher (ProxiedOnly) and
// clusterdns's (no selector) side by side on one kube-apiserver. A Service
// labelled for another proxy and a headless Service (its slice labelled
// headless, as the EndpointSlice controller labels it) are created before a
// plain one: once svcproxy's Snapshot shows the plain one and its endpoint,
// the others would be in it too, had the server sent them (each informer
// sees its kind in the order it was written). clusterdns's shows all three.
// Then the plain Service is labelled for another proxy, and goes from
// svcproxy's Snapshots only (a watch with a label selector reports an object
// that stops matching as deleted); unlabelled, it comes back. Each
// relabelling also moves its port, which clusterdns's Snapshot must show.
func TestAPIServerProxiedOnly(t *testing.T) {
	srv := kapitest.Start(t)
	ns := srv.Namespace(t)
	api := srv.Client
	proxy := startAPIWatcherConfig(t, watch.Config{Kubeconfig: srv.Kubeconfig, ProxiedOnly: true, NodeName: "node-a"})
	dns := startAPIWatcherConfig(t, watch.Config{Kubeconfig: srv.Kubeconfig})

	create := func(ctx context.Context) error {
		other := apiSelectService("other", "198.18.0.20")
		other.Labels = map[string]string{watch.LabelServiceProxyName: "other-proxy"}
		db := apiSelectService("db", corev1.ClusterIPNone)
		dbSlice := apiSelectSlice("db-1", "db", "198.19.0.3")
		dbSlice.Labels[corev1.IsHeadlessService] = ""
		for _, svc := range []*corev1.Service{other, db, apiSelectService("web", "198.18.0.10")} {
			if _, err := api.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		for _, es := range []*discoveryv1.EndpointSlice{apiSelectSlice("other-1", "other", "198.19.0.2"), dbSlice, apiSelectSlice("web-1", "web", "198.19.0.1")} {
			if _, err := api.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	web := "web:http 198.18.0.10:80 -> 198.19.0.1:8080"
	all := "db:pg :5432 -> 198.19.0.3:5432\nother:http 198.18.0.20:80 -> 198.19.0.2:8080\n" + web
	proxy.step(t, "create other, db, web: svcproxy's", create, apiSelected(ns, web))
	dns.wait(t, "clusterdns's", proxy.began(), apiSelected(ns, all))

	// Each relabelling moves web's port too, so that clusterdns's Snapshot
	// shows it has seen that very version of web.
	label := func(value *string, port int32) func(context.Context) error {
		return func(ctx context.Context) error {
			svc, err := api.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if value == nil {
				delete(svc.Labels, watch.LabelServiceProxyName)
			} else {
				svc.Labels = map[string]string{watch.LabelServiceProxyName: *value}
			}
			svc.Spec.Ports[0].Port = port
			_, err = api.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
			return err
		}
	}
	withPort := func(s string, port int) string {
		return strings.Replace(s, "198.18.0.10:80 ", fmt.Sprintf("198.18.0.10:%d ", port), 1)
	}
	// An empty value counts: the label's presence is what kube-proxy selects on.
	proxy.step(t, "label web for another proxy: svcproxy's", label(new(""), 81), apiSelected(ns, ""))
	dns.wait(t, "clusterdns's keeps it", proxy.began(), apiSelected(ns, withPort(all, 81)))
	proxy.step(t, "unlabel web: svcproxy's", label(nil, 82), apiSelected(ns, withPort(web, 82)))
	dns.wait(t, "clusterdns's", proxy.began(), apiSelected(ns, withPort(all, 82)))
}

// began is when the change of the last step started, for a second follower
// of the same change.
func (f *apiFollower) began() time.Time { return f.lastBegan }

// apiSelected is a Snapshot whose Services in ns read want, one port a line:
// "web:http 198.18.0.10:80 -> 198.19.0.1:8080" (ClusterIP "" for a headless
// Service).
func apiSelected(ns, want string) func(*service.Snapshot) bool {
	return func(s *service.Snapshot) bool {
		var lines []string
		for _, svc := range s.Services() {
			if svc.Namespace != ns {
				continue
			}
			ip := ""
			if len(svc.ClusterIPs) > 0 {
				ip = svc.ClusterIPs[0].String()
			}
			for _, p := range svc.Ports {
				var eps []string
				for _, e := range p.Endpoints {
					eps = append(eps, e.Addr.String())
				}
				lines = append(lines, fmt.Sprintf("%s:%s %s:%d -> %s", svc.Name, p.Name.Port, ip, p.Port, strings.Join(eps, ",")))
			}
		}
		return strings.Join(lines, "\n") == want
	}
}

func apiSelectService(name, clusterIP string) *corev1.Service {
	port := corev1.ServicePort{Name: "http", Port: 80}
	if clusterIP == corev1.ClusterIPNone {
		port = corev1.ServicePort{Name: "pg", Port: 5432}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{port}},
	}
}

func apiSelectSlice(name, svc, ip string) *discoveryv1.EndpointSlice {
	port, portName := int32(8080), "http"
	if svc == "db" {
		port, portName = 5432, "pg"
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}
}
