package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/nsenter"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
)

// TestRealNode brings up the lab with a real node (svclab up --kubelet):
// containerd, the kubelet and kube-scheduler in the lab's node, svcproxy as
// deploy/realnode's DaemonSet and clusterdns as its Deployment, both from
// the image. `up` returns once their pods are Ready. Then a pod of its own
// (the pause image) runs, and from its network namespace two ClusterIP
// Services answer through svcproxy's rules (kubernetes, whose endpoint is
// the API server on the node; kube-dns's metrics port, whose endpoints are
// clusterdns's pods) and names resolve through kube-dns, also once `svclab
// mode` has rolled svcproxy's DaemonSet out in another mode. A pod whose image
// is absent fails to pull at once instead of waiting on a registry. After
// `svclab down` nothing is left: namespaces, mounts, cgroup directories,
// processes. It logs the time to Ready and the kubelet's and containerd's
// resident memory.
func TestRealNode(t *testing.T) {
	netnstest.RequireRoot(t, append(lab.DemoTools, cluster.NodeTools...)...)
	kapitest.NodeBinaries(t) // skips, with advice, when `make node-bins` has not built them
	bin := build(t)
	buildImages(t, bin, images.Config{}, images.All()[:1])
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
	out := c.svclab("--bin", bin, "up", "--kubelet", "--mode", "iptables")
	t.Logf("svclab up --kubelet: svcproxy's and clusterdns's pods Ready in %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	t.Logf("resident memory: kubelet %s, containerd %s, kube-scheduler %s", rss(t, "kubelet"), rss(t, "containerd"), rss(t, "kube-scheduler"))
	t.Logf("pods:\n%s", c.svclab("kubectl", "get", "pods", "-A", "-o", "wide"))

	c.svclab("kubectl", "run", "probe", "--image="+images.PauseRef, "--image-pull-policy=Never", "--restart=Never")
	c.svclab("kubectl", "wait", "--for=condition=Ready", "pod/probe", "--timeout=2m")
	var pod corev1.Pod
	getJSON(c, &pod, "get", "pod", "probe")
	netns, err := l.Cluster().PodNetNS(string(pod.UID))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod probe: %s, network namespace %s", pod.Status.PodIP, netns)

	t.Run("services", func(t *testing.T) {
		ca, err := os.ReadFile(filepath.Join(lab.DefaultStateDir, "pki", "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		client := podHTTP(netns, ca)
		for _, url := range []string{
			"https://198.18.0.1/readyz",       // kubernetes: the API server on the node
			"http://198.18.0.10:9153/healthz", // kube-dns: clusterdns's pods
		} {
			c.t = t
			c.eventually("GET "+url+" from pod probe", func() (bool, string) {
				code, err := get(client, url)
				return err == nil && code == http.StatusOK, fmt.Sprintf("%d %v", code, err)
			})
		}
	})
	t.Run("dns", func(t *testing.T) {
		c.t = t
		for name, want := range map[string]string{
			"kubernetes.default.svc.cluster.local.":   "198.18.0.1",
			"kube-dns.kube-system.svc.cluster.local.": "198.18.0.10",
		} {
			c.eventually(name+" from pod probe", func() (bool, string) {
				got, err := lookupIn(netns, "198.18.0.10:53", name)
				return err == nil && got == want, fmt.Sprintf("%q %v", got, err)
			})
		}
	})
	t.Run("mode", func(t *testing.T) {
		// As on kind: the ConfigMap, then a rollout of the DaemonSet.
		c.t = t
		out := c.svclab("mode", "nftables")
		if !strings.Contains(out, "svcproxy restarted in nftables mode") {
			t.Fatalf("svclab mode nftables: %s", out)
		}
		client := podHTTP(netns, nil)
		c.eventually("kube-dns's metrics port from pod probe in nftables mode", func() (bool, string) {
			code, err := get(client, "http://198.18.0.10:9153/healthz")
			return err == nil && code == http.StatusOK, fmt.Sprintf("%d %v", code, err)
		})
	})
	t.Run("pull fails fast", func(t *testing.T) {
		c.t = t
		c.svclab("kubectl", "run", "absent", "--image=svcproxy.test/absent:1", "--image-pull-policy=IfNotPresent", "--restart=Never")
		c.eventually("pod absent: ErrImagePull", func() (bool, string) {
			var p corev1.Pod
			getJSON(c, &p, "get", "pod", "absent")
			for _, s := range p.Status.ContainerStatuses {
				if w := s.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
					t.Logf("pod absent: %s: %s", w.Reason, w.Message)
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", p.Status.ContainerStatuses)
		})
	})
}

// buildImages writes into dir the archive `make image` writes (svcproxy's
// image and clusterdns's, for kubeadm's coredns Deployment) and those of
// `make e2e-images` for specs (their programs from cfg; the pause program is
// built here): the node imports them.
func buildImages(t *testing.T, dir string, cfg images.Config, specs []images.Spec) {
	t.Helper()
	tmp := t.TempDir()
	bins, err := image.BuildBinaries(tmp, "svcproxy", "clusterdns", "images/pause")
	if err != nil {
		t.Fatal(err)
	}
	img, err := image.Build(image.Config{Binaries: map[string]string{"svcproxy": bins["svcproxy"], "clusterdns": bins["clusterdns"]}})
	if err != nil {
		t.Fatal(err)
	}
	dns, err := image.ClusterDNS(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := image.WriteImages(filepath.Join(dir, "svcproxy-image.tar"),
		image.Named{Ref: image.DefaultRef, Image: img}, image.Named{Ref: image.ClusterDNSRef, Image: dns}); err != nil {
		t.Fatal(err)
	}
	cfg.Pause = bins["pause"]
	if _, err := images.Write(filepath.Join(dir, "e2e-images"), cfg, specs); err != nil {
		t.Fatal(err)
	}
}

// rss is the resident memory of the lab process name, from its pid file.
func rss(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(lab.DefaultStateDir, name+".pid"))
	if err != nil {
		return "?"
	}
	status, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(b)), "status"))
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
		}
	}
	return "?"
}

// podHTTP is an HTTP client whose connections start in a pod's network
// namespace and trust the lab's CA.
func podHTTP(netns string, caPEM []byte) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialFrom(ctx, netns, network, addr)
			},
		},
	}
}

func dialFrom(ctx context.Context, netns, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := nsenter.Run(netns, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

func get(client *http.Client, url string) (int, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// lookupIn asks server for name's A record from a pod's network namespace
// and returns the first address.
func lookupIn(netns, server, name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := dialFrom(ctx, netns, "udp", server)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	co := &dns.Conn{Conn: conn}
	if err := co.WriteMsg(q); err != nil {
		return "", err
	}
	r, err := co.ReadMsg()
	if err != nil {
		return "", err
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), nil
		}
	}
	return "", fmt.Errorf("%s: %s, no A record", name, dns.RcodeToString[r.Rcode])
}
