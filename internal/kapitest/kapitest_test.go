package kapitest_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/svcproxy/svcproxy/internal/kapitest"
)

// TestServer starts a real API server, writes a Service, reads it back, and
// does the same again after a restart of kube-apiserver.
func TestServer(t *testing.T) {
	srv := kapitest.Start(t)
	ns := srv.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	services := srv.Client.CoreV1().Services(ns)

	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			ClusterIP: "198.18.0.10",
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := services.Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service %s/web: %v", ns, err)
	}
	checkClusterIP(ctx, t, srv, ns, "web", "198.18.0.10")

	srv.Restart(t)
	checkClusterIP(ctx, t, srv, ns, "web", "198.18.0.10")

	// Allocation still works after the restart, and from the test range.
	db := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}},
	}
	got, err := services.Create(ctx, db, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s/db after restart: %v", ns, err)
	}
	if got.Spec.ClusterIP == "" || got.Spec.ClusterIP[:7] != "198.18." {
		t.Errorf("service %s/db: spec.clusterIP = %q, want one from %s", ns, got.Spec.ClusterIP, kapitest.ServiceCIDR)
	}
}

// TestKubeconfig checks that the kubeconfig file is what the code under test
// would be given: the server's version comes back through it.
func TestKubeconfig(t *testing.T) {
	srv := kapitest.Start(t)
	v, err := srv.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	t.Logf("server version %s (%s)", v.GitVersion, srv.Kubeconfig)
	if v.Major != "1" || v.Minor != "37" {
		t.Errorf("server version %s.%s (%s), want 1.37", v.Major, v.Minor, v.GitVersion)
	}
}

func checkClusterIP(ctx context.Context, t *testing.T, srv *kapitest.Server, ns, name, want string) {
	t.Helper()
	got, err := srv.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service %s/%s: %v", ns, name, err)
	}
	if got.Spec.ClusterIP != want {
		t.Errorf("service %s/%s: spec.clusterIP = %q, want %q", ns, name, got.Spec.ClusterIP, want)
	}
}
