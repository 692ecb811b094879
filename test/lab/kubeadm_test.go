package lab

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
)

// webOnEveryNode is a Deployment of three web servers, one per node (the
// control-plane node's taint tolerated, a required anti-affinity by host
// name), each answering HTTP with its pod's name; and two Services in front
// of them, a ClusterIP and a NodePort.
const webOnEveryNode = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      tolerations: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: web}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: web
        image: ` + images.BusyBoxRef + `
        imagePullPolicy: Never
        command: [sh, -c, 'mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www']
        ports: [{containerPort: 8080}]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-nodeport}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, nodePort: 30080}]
`

// TestKubeadmCluster is the three-node smoke test: `svclab up --nodes 3`
// makes the cluster with kubeadm (kube-proxy and CoreDNS first), a web
// server runs on every node, and from every node a ClusterIP reaches the
// pods of all three and a NodePort of a worker reaches pods on the others,
// through kube-proxy, then through svcproxy once `svclab use svcproxy` has
// rolled kube-proxy's DaemonSet to svcproxy's image, and through kube-proxy
// again after `svclab use kube-proxy`; names resolve through CoreDNS, then
// clusterdns, then CoreDNS. `svclab web` shows each pod on its node;
// `svclab rules --node` and `svclab trace --node` read a worker's rules,
// and in socklb mode its socket LB's maps (webShowsNodes,
// rulesAndTraceOnAWorker, socketLBOnTheNodes). After `svclab down` nothing is left. It logs the
// time each step took and the resident memory of the kubelets, the
// containerds, kube-apiserver and etcd.
func TestKubeadmCluster(t *testing.T) {
	netnstest.RequireRoot(t, append(lab.DemoTools, cluster.NodeTools...)...)
	kapitest.ClusterBinaries(t) // skips, with advice, when `make cluster-bins` has not built them
	bin := build(t)
	buildImages(t, bin, images.Config{}, []images.Spec{images.All()[0], images.All()[1]}) // pause, busybox
	buildKubeadmImages(t, bin)
	t.Cleanup(func() {
		down(t, bin)
		requireClean(t, bin)
	})
	l, err := lab.New(lab.Config{Stdout: io.Discard, Self: bin + "/svclab", BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	c := &cpLab{t: t, bin: bin, l: l}
	start := time.Now()
	out := c.svclabLong("--bin", bin, "up", "--nodes", "3")
	t.Logf("svclab up --nodes 3: Ready in %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	t.Logf("nodes:\n%s", c.svclab("kubectl", "get", "nodes", "-o", "wide"))

	c.svclab("kubectl", "apply", "-f", writeTemp(t, "web.yaml", webOnEveryNode))
	c.svclab("kubectl", "rollout", "status", "deployment/web", "--timeout=3m")
	var pods corev1.PodList
	getJSON(c, &pods, "get", "pods", "-l", "app=web")
	nodeOf := map[string]string{}
	for _, p := range pods.Items {
		nodeOf[p.Name] = p.Spec.NodeName
	}
	t.Logf("web's pods: %v", nodeOf)
	var svc corev1.Service
	getJSON(c, &svc, "get", "service", "web")
	clusterIP := svc.Spec.ClusterIP

	// reach checks every node reaches the ClusterIP's pods on all three
	// nodes, and the NodePort on worker1 reaches pods on the others.
	reach := func(t *testing.T, serving string) {
		c.t = t
		for _, from := range []string{"node", "worker1", "worker2"} {
			c.eventually(fmt.Sprintf("%s: ClusterIP %s from %s reaches every node's pod", serving, clusterIP, from), func() (bool, string) {
				nodes := answeredBy(from, "http://"+clusterIP+"/", nodeOf)
				return slices.Equal(nodes, []string{"node", "worker1", "worker2"}), fmt.Sprintf("answered by pods on %v", nodes)
			})
		}
		c.eventually(serving+": NodePort 198.19.0.2:30080 from worker2 reaches pods on the other nodes", func() (bool, string) {
			nodes := answeredBy("worker2", "http://198.19.0.2:30080/", nodeOf)
			return slices.Contains(nodes, "node") && slices.Contains(nodes, "worker2"), fmt.Sprintf("answered by pods on %v", nodes)
		})
	}
	// resolve checks a name resolves through kube-dns from every node.
	resolve := func(t *testing.T, serving string) {
		c.t = t
		for _, from := range []string{"node", "worker1", "worker2"} {
			c.eventually(serving+": web.default.svc.cluster.local from "+from, func() (bool, string) {
				got, err := lookupIn("/run/netns/svclab-"+from, "198.18.0.10:53", "web.default.svc.cluster.local.")
				return err == nil && got == clusterIP, fmt.Sprintf("%q %v", got, err)
			})
		}
	}

	t.Run("kube-proxy and CoreDNS", func(t *testing.T) {
		reach(t, "kube-proxy")
		resolve(t, "CoreDNS")
		if out := c.svclab("rules", "--node", "worker2"); !strings.Contains(out, "KUBE-SERVICES") {
			t.Errorf("svclab rules --node worker2: no KUBE-SERVICES, kube-proxy's chain, in\n%s", out)
		}
		execOnANode(t, c)
	})
	t.Run("svclab web", func(t *testing.T) { webShowsNodes(t, bin, nodeOf) })
	for _, step := range []struct{ use, serving string }{
		{"svcproxy", "svcproxy"}, {"clusterdns", "clusterdns"}, {"kube-proxy", "kube-proxy"}, {"coredns", "CoreDNS"},
	} {
		t.Run("use "+step.use, func(t *testing.T) {
			c.t = t
			start := time.Now()
			out := c.svclabLong("use", step.use)
			t.Logf("svclab use %s: %s(%s)", step.use, out, time.Since(start).Round(time.Millisecond))
			if strings.HasSuffix(step.use, "proxy") {
				reach(t, step.serving)
				if step.use == "svcproxy" {
					rulesAndTraceOnAWorker(t, c, clusterIP)
					socketLBOnTheNodes(t, c, clusterIP, reach)
				}
			} else {
				resolve(t, step.serving)
			}
		})
	}
	c.t = t
	t.Logf("resident memory: %s", kubeadmRSS(t))
}

// svclabLong is svclab with room for kubeadm: `up --nodes 3` and `use`
// wait for every node and pod.
func (c *cpLab) svclabLong(args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	out, err := svclab(ctx, c.bin, args...)
	if err != nil {
		c.t.Fatalf("svclab %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// answeredBy GETs url from the lab host from ten times and returns the
// nodes of the pods that answered, sorted, each once.
func answeredBy(from, url string, nodeOf map[string]string) []string {
	client := podHTTP("/run/netns/svclab-"+from, nil)
	client.Timeout = 2 * time.Second
	seen := map[string]bool{}
	for range 10 {
		resp, err := client.Get(url)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if n, ok := nodeOf[strings.TrimSpace(string(b))]; ok {
				seen[n] = true
			}
		}
	}
	var nodes []string
	for n := range seen {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	return nodes
}

// kubeadmImagesBuilt are the directories buildKubeadmImages filled, once
// each per test binary (the smoke test and the tutorial share one).
var kubeadmImagesBuilt sync.Map

// buildKubeadmImages writes kubeadm's images into dir/kubeadm-images, as
// `make kubeadm-images` does, from test/kapi's cache.
func buildKubeadmImages(t *testing.T, dir string) {
	t.Helper()
	if _, done := kubeadmImagesBuilt.Load(dir); done {
		return
	}
	b := kapitest.ClusterBinaries(t)
	tmp := t.TempDir()
	pause := buildPause(t, tmp)
	cfg := images.Config{Pause: pause, KubeAPIServer: b.APIServer, KubeControllerManager: b.ControllerManager,
		KubeScheduler: b.Scheduler, KubeProxy: b.KubeProxy, CoreDNS: b.CoreDNS, Etcd: b.ClusterEtcd, Etcdctl: b.ClusterEtcdctl}
	start := time.Now()
	if _, err := images.Write(filepath.Join(dir, "kubeadm-images"), cfg, images.Kubeadm()); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubeadm's images built in %s", time.Since(start).Round(time.Millisecond))
	kubeadmImagesBuilt.Store(dir, true)
}

// kubeadmRSS is the resident memory of each kubelet and containerd (their
// pid files), and of kube-apiserver and etcd (static pods: found by name).
func kubeadmRSS(t *testing.T) string {
	var parts []string
	for _, n := range []string{"", "-worker1", "-worker2"} {
		parts = append(parts, "kubelet"+n+" "+rss(t, "kubelet"+n), "containerd"+n+" "+rss(t, "containerd"+n))
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		parts = append(parts, name+" "+rssOf(name))
	}
	return strings.Join(parts, ", ")
}

// buildPause builds the pause program into dir and returns it.
func buildPause(t *testing.T, dir string) string {
	t.Helper()
	bins, err := image.BuildBinaries(dir, "images/pause")
	if err != nil {
		t.Fatal(err)
	}
	return bins["pause"]
}

// writeTemp writes body to a file of the test's and returns its path.
func writeTemp(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// rssOf is the largest resident memory of the processes named comm (the
// static pods' programs have no pid file of the lab's).
func rssOf(comm string) string {
	var most int
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				most = max(most, kb)
			}
		}
	}
	if most == 0 {
		return "?"
	}
	return fmt.Sprintf("%.1f MiB", float64(most)/1024)
}
