package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/deploy"
	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/internal/k8sbin"
	"github.com/svcproxy/svcproxy/internal/kapitest"
)

// TestKindCluster checks the kind cluster config leaves kube-proxy out.
func TestKindCluster(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("kind", "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Kind       string
		APIVersion string `json:"apiVersion"`
		Networking struct {
			KubeProxyMode string `json:"kubeProxyMode"`
		}
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.Kind != "Cluster" || c.APIVersion != "kind.x-k8s.io/v1alpha4" || c.Networking.KubeProxyMode != "none" {
		t.Errorf("kind/cluster.yaml: kind %q apiVersion %q networking.kubeProxyMode %q, want Cluster, kind.x-k8s.io/v1alpha4, none",
			c.Kind, c.APIVersion, c.Networking.KubeProxyMode)
	}
}

// TestFiles checks that Files, what svclab applies, is what the repository has.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	if err := deploy.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".yaml" {
			if d != nil && d.IsDir() && p == "testdata" {
				return filepath.SkipDir // the tests' files, not manifests
			}
			return err
		}
		n++
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: not in deploy.Files as it is on disk (%v)", p, err)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("no manifests found: %v", err)
	}
}

// TestApply applies every kustomization of deploy/ to a real API server
// (kubectl apply --server-side -k: the server validates each object,
// field by field, pod templates included), then checks what it holds and
// that the ServiceAccounts' tokens may do what svcproxy and clusterdns do
// and nothing more. The API server admits privileged pods, as kubeadm's
// does: kubeadm's kube-proxy DaemonSet (deploy/kubeadm) is privileged and
// stays so with svcproxy's image, while svcproxy's own (deploy/base) asks
// only for NET_ADMIN and NET_RAW.
func TestApply(t *testing.T) {
	srv := kapitest.Start(t)
	kubectl := kapitest.ControlPlaneBinaries(t).Kubectl
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	apply := func(dir string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", srv.Kubeconfig,
			"apply", "--server-side", "-k", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply --server-side -k %s: %v\n%s", dir, err, out)
		}
		t.Logf("kubectl apply --server-side -k %s:\n%s", dir, out)
	}
	// lab first: it sets kube-dns's ClusterIP, which is immutable once set;
	// kind's leaves it to the server (kind's kube-dns already has one).
	apply("lab")
	apply("realnode")
	c := srv.Client
	// realnode's one change to the DaemonSet: /lib/modules from the node's /run.
	if ds, err := c.AppsV1().DaemonSets("kube-system").Get(ctx, "svcproxy", metav1.GetOptions{}); err != nil {
		t.Errorf("daemonset kube-system/svcproxy: %v", err)
	} else if v := ds.Spec.Template.Spec.Volumes[1]; v.Name != "lib-modules" || v.HostPath == nil || v.HostPath.Path != "/run/lib-modules" {
		t.Errorf("realnode: daemonset svcproxy: volume %s: %+v, want lib-modules from /run/lib-modules", v.Name, v.VolumeSource)
	}
	apply("kind")
	apply("rbac")
	apply("kubeadm")
	apply("coredns")
	// kubeadm's coredns objects: the Deployment runs clusterdns's image with
	// kubeadm's arguments, and its ServiceAccount reads what clusterdns
	// reads through kubeadm's ClusterRole system:coredns.
	if d, err := c.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{}); err != nil {
		t.Errorf("deployment kube-system/coredns: %v", err)
	} else if ctr := d.Spec.Template.Spec.Containers[0]; ctr.Image != image.ClusterDNSRef || strings.Join(ctr.Args, " ") != "-conf /etc/coredns/Corefile" {
		t.Errorf("deployment coredns: image %q args %q", ctr.Image, ctr.Args)
	}
	t.Run("coredns", func(t *testing.T) {
		c := tokenClient(ctx, t, srv, kubectl, "coredns")
		opts := metav1.ListOptions{Limit: 1}
		for what, do := range map[string]func() error{
			"list services":       func() error { _, err := c.CoreV1().Services("").List(ctx, opts); return err },
			"list endpointslices": func() error { _, err := c.DiscoveryV1().EndpointSlices("").List(ctx, opts); return err },
			"list namespaces":     func() error { _, err := c.CoreV1().Namespaces().List(ctx, opts); return err },
			"list pods":           func() error { _, err := c.CoreV1().Pods("").List(ctx, opts); return err },
		} {
			if err := do(); err != nil {
				t.Errorf("coredns may not %s: %v", what, err)
			}
		}
	})
	// kubeadm's objects: kube-proxy's ServiceAccount reads what svcproxy
	// reads through Kubernetes' own ClusterRole system:node-proxier.
	if ds, err := c.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{}); err != nil {
		t.Errorf("daemonset kube-system/kube-proxy: %v", err)
	} else if ctr := ds.Spec.Template.Spec.Containers[0]; ctr.Image != image.DefaultRef || ctr.Command[0] != "/usr/local/bin/kube-proxy" {
		t.Errorf("daemonset kube-proxy: image %q command %q", ctr.Image, ctr.Command)
	} else if sc := ctr.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		// kubeadm's DaemonSet is privileged, and the overlay keeps it so
		// (only the image changes): the API server admits it because it
		// runs with --allow-privileged=true, as kubeadm's does.
		t.Errorf("daemonset kube-proxy: securityContext %+v, want kubeadm's privileged: true", sc)
	}
	t.Run("kube-proxy", func(t *testing.T) {
		c := tokenClient(ctx, t, srv, kubectl, "kube-proxy")
		opts := metav1.ListOptions{Limit: 1}
		for what, do := range map[string]func() error{
			"list services":       func() error { _, err := c.CoreV1().Services("").List(ctx, opts); return err },
			"list endpointslices": func() error { _, err := c.DiscoveryV1().EndpointSlices("").List(ctx, opts); return err },
			"list nodes":          func() error { _, err := c.CoreV1().Nodes().List(ctx, opts); return err },
		} {
			if err := do(); err != nil {
				t.Errorf("kube-proxy may not %s: %v", what, err)
			}
		}
	})

	if ds, err := c.AppsV1().DaemonSets("kube-system").Get(ctx, "svcproxy", metav1.GetOptions{}); err != nil {
		t.Errorf("daemonset kube-system/svcproxy: %v", err)
	} else if spec := ds.Spec.Template.Spec; !spec.HostNetwork || spec.ServiceAccountName != "svcproxy" || len(spec.Tolerations) == 0 {
		t.Errorf("daemonset svcproxy: hostNetwork %v, serviceAccountName %q, tolerations %v", spec.HostNetwork, spec.ServiceAccountName, spec.Tolerations)
	} else {
		// svcproxy's own DaemonSet is not privileged: it asks for the two
		// capabilities its modes use (kind.md says what IPVS adds).
		for _, ctr := range append(spec.InitContainers, spec.Containers...) {
			sc := ctr.SecurityContext
			if sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.Capabilities == nil ||
				fmt.Sprint(sc.Capabilities.Add) != "[NET_ADMIN NET_RAW]" {
				t.Errorf("daemonset svcproxy: container %s: securityContext %+v, want capabilities NET_ADMIN and NET_RAW, not privileged", ctr.Name, sc)
			}
		}
	}
	if _, err := c.AppsV1().Deployments("kube-system").Get(ctx, "clusterdns", metav1.GetOptions{}); err != nil {
		t.Errorf("deployment kube-system/clusterdns: %v", err)
	}
	svc, err := c.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("service kube-system/kube-dns: %v", err)
	}
	if svc.Spec.ClusterIP != "198.18.0.10" || svc.Spec.Selector["k8s-app"] != "kube-dns" {
		t.Errorf("service kube-dns: clusterIP %s selector %v, want 198.18.0.10 and k8s-app=kube-dns", svc.Spec.ClusterIP, svc.Spec.Selector)
	}
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "svcproxy", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("configmap kube-system/svcproxy: %v", err)
	}
	if cm.Data["apiserver-host"] != "kind-control-plane" || cm.Data["mode"] == "" {
		t.Errorf("configmap svcproxy (kind, applied last): %v", cm.Data)
	}

	for _, sa := range []string{"svcproxy", "clusterdns"} {
		t.Run(sa, func(t *testing.T) { checkRBAC(ctx, t, srv, kubectl, sa, sa == "svcproxy", sa == "clusterdns") })
	}
}

// tokenClient is a client with a token of kube-system's ServiceAccount sa.
func tokenClient(ctx context.Context, t *testing.T, srv *kapitest.Server, kubectl, sa string) *kubernetes.Clientset {
	t.Helper()
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", srv.Kubeconfig,
		"-n", "kube-system", "create", "token", sa).Output()
	if err != nil {
		t.Fatalf("kubectl create token %s: %v", sa, err)
	}
	cfg := rest.AnonymousClientConfig(srv.Config)
	cfg.BearerToken = strings.TrimSpace(string(out))
	cfg.WarningHandler = rest.NoWarnings{} // "v1 Endpoints is deprecated", for the denied lists
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkRBAC uses the ServiceAccount's own token: it may list and watch what
// the informers of service/watch read, and nothing else. nodes says whether
// it reads its Node (svcproxy does, clusterdns does not); dns whether it reads
// Namespaces and Pods, as CoreDNS does (clusterdns).
func checkRBAC(ctx context.Context, t *testing.T, srv *kapitest.Server, kubectl, sa string, nodes, dns bool) {
	c := tokenClient(ctx, t, srv, kubectl, sa)
	opts := metav1.ListOptions{Limit: 1}
	allowed := map[string]func() error{
		"list services":       func() error { _, err := c.CoreV1().Services("").List(ctx, opts); return err },
		"list endpointslices": func() error { _, err := c.DiscoveryV1().EndpointSlices("").List(ctx, opts); return err },
	}
	listNodes := func() error { _, err := c.CoreV1().Nodes().List(ctx, opts); return err }
	watchNodes := func() error {
		w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-a"})
		if err == nil {
			w.Stop()
		}
		return err
	}
	getNode := func() error { _, err := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); return err }
	if nodes {
		allowed["list nodes"], allowed["watch nodes"] = listNodes, watchNodes
	}
	listNamespaces := func() error { _, err := c.CoreV1().Namespaces().List(ctx, opts); return err }
	listPods := func() error { _, err := c.CoreV1().Pods("").List(ctx, opts); return err }
	if dns {
		allowed["list namespaces"], allowed["list pods"] = listNamespaces, listPods
	}
	for what, do := range allowed {
		if err := do(); err != nil {
			t.Errorf("%s may not %s: %v", sa, what, err)
		}
	}
	denied := map[string]func() error{
		"list secrets":    func() error { _, err := c.CoreV1().Secrets("").List(ctx, opts); return err },
		"list endpoints":  func() error { _, err := c.CoreV1().Endpoints("").List(ctx, opts); return err },
		"list configmaps": func() error { _, err := c.CoreV1().ConfigMaps("").List(ctx, opts); return err },
		"get node":        getNode,
		"delete service kube-dns": func() error {
			return c.CoreV1().Services("kube-system").Delete(ctx, "kube-dns", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		},
	}
	if !nodes {
		denied["list nodes"], denied["watch nodes"] = listNodes, watchNodes
	}
	if !dns {
		denied["list namespaces"], denied["list pods"] = listNamespaces, listPods
	}
	for what, do := range denied {
		if err := do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s may %s (err %v), want Forbidden", sa, what, err)
		}
	}
}

// TestKubeadmOverlay: deploy/kubeadm is kubeadm's own print
// (testdata/kubeadm-print.yaml), object for object and field for field,
// except the DaemonSet's image.
func TestKubeadmOverlay(t *testing.T) {
	want := readObjects(t, "testdata/kubeadm-print.yaml")
	got := readObjects(t, "kubeadm/kube-proxy.yaml")
	if len(got) != len(want) || len(want) != 6 {
		t.Fatalf("deploy/kubeadm has %d objects, kubeadm's print %d (want 6: ServiceAccount, ClusterRoleBinding, Role, RoleBinding, ConfigMap, DaemonSet)", len(got), len(want))
	}
	for i := range want {
		if want[i]["kind"] == "DaemonSet" {
			ctr := want[i]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			if ctr["image"] != "registry.k8s.io/kube-proxy:v1.37.2" {
				t.Fatalf("kubeadm's DaemonSet runs %v, want registry.k8s.io/kube-proxy:v1.37.2", ctr["image"])
			}
			ctr["image"] = image.DefaultRef
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			a, _ := yaml.Marshal(got[i])
			b, _ := yaml.Marshal(want[i])
			t.Errorf("object %d differs from kubeadm's beyond the image:\n%s\nkubeadm's (image replaced):\n%s", i, a, b)
		}
	}
}

// TestCoreDNSOverlay: deploy/coredns is kubeadm's own print
// (testdata/kubeadm-coredns-print.yaml), object for object and field for
// field, except the Deployment's image and the Service kube-dns, which it
// leaves to the cluster; its Corefile is kubeadm's default, the one
// dnsresolve/corefile reads in its tests.
func TestCoreDNSOverlay(t *testing.T) {
	var want []map[string]any
	for _, o := range readObjects(t, "testdata/kubeadm-coredns-print.yaml") {
		if o["kind"] != "Service" {
			want = append(want, o)
		}
	}
	got := readObjects(t, "coredns/coredns.yaml")
	if len(got) != len(want) || len(want) != 5 {
		t.Fatalf("deploy/coredns has %d objects, kubeadm's print %d without its Service (want 5: Deployment, ConfigMap, ClusterRole, ClusterRoleBinding, ServiceAccount)", len(got), len(want))
	}
	for i := range want {
		switch want[i]["kind"] {
		case "Deployment":
			ctr := want[i]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			if ctr["image"] != "registry.k8s.io/coredns/coredns:v1.14.6" {
				t.Fatalf("kubeadm's Deployment runs %v, want registry.k8s.io/coredns/coredns:v1.14.6", ctr["image"])
			}
			ctr["image"] = image.ClusterDNSRef
		case "ConfigMap":
			corefile, err := os.ReadFile("../dnsresolve/corefile/testdata/kubeadm-v1.37.2.Corefile")
			if err != nil {
				t.Fatal(err)
			}
			// readObjects splits the file before each "\n---": the block's
			// last line break goes with it.
			if got := want[i]["data"].(map[string]any)["Corefile"]; got != strings.TrimSuffix(string(corefile), "\n") {
				t.Errorf("kubeadm's ConfigMap's Corefile is not dnsresolve/corefile's testdata:\n%q\n%q", got, corefile)
			}
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			a, _ := yaml.Marshal(got[i])
			b, _ := yaml.Marshal(want[i])
			t.Errorf("object %d differs from kubeadm's beyond the image:\n%s\nkubeadm's (image replaced):\n%s", i, a, b)
		}
	}
}

// readObjects reads the YAML documents of file, each as a map.
func readObjects(t *testing.T, file string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, doc := range strings.Split(string(b), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(m) > 0 {
			out = append(out, m)
		}
	}
	return out
}

// TestKubeadmPrints runs the real kubeadm v1.37.2 (when internal/k8sbin has
// it cached) and checks it still prints testdata/kubeadm-print.yaml.
func TestKubeadmPrints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bins, err := k8sbin.Build(ctx, k8sbin.Config{KubeProxy: true, CachedOnly: true})
	if errors.Is(err, k8sbin.ErrNotBuilt) || errors.Is(err, k8sbin.ErrUnavailable) {
		t.Skipf("needs kubeadm v1.37.2 in the cache: make cluster-bins (%v)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bins.Kubeadm, "init", "phase", "addon", "kube-proxy",
		"--print-manifest", "--config", "testdata/kubeadm.yaml").Output()
	if err != nil {
		t.Fatalf("kubeadm: %v", err)
	}
	want, err := os.ReadFile("testdata/kubeadm-print.yaml")
	if err != nil || !bytes.Equal(out, want) {
		t.Errorf("kubeadm prints:\n%s\ntestdata/kubeadm-print.yaml (%v):\n%s", out, err, want)
	}
	out, err = exec.CommandContext(ctx, bins.Kubeadm, "init", "phase", "addon", "coredns",
		"--print-manifest", "--config", "testdata/kubeadm.yaml").Output()
	if err != nil {
		t.Fatalf("kubeadm: %v", err)
	}
	want, err = os.ReadFile("testdata/kubeadm-coredns-print.yaml")
	if err != nil || !bytes.Equal(out, want) {
		t.Errorf("kubeadm prints:\n%s\ntestdata/kubeadm-coredns-print.yaml (%v):\n%s", out, err, want)
	}
}
