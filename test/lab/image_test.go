package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/deploy/image"
	"github.com/svcproxy/svcproxy/lab"
)

// runImage builds the container image as `make image` does, unpacks its
// root filesystem, and runs the image's svcproxy in the lab's node in place
// of the lab's own, the way the DaemonSet would run it: its arguments and
// environment are the DaemonSet's, as the lab's API server holds it
// (deploy/lab), with $(VAR)s expanded from the ConfigMap, and its in-cluster
// credentials are svcproxy's ServiceAccount token. It must serve web.
func runImage(c *cpLab) {
	t := c.t
	root := unpackImage(c)

	// The DaemonSet's container and the ConfigMap its environment refers to.
	var ds appsv1.DaemonSet
	getJSON(c, &ds, "-n", "kube-system", "get", "daemonset", "svcproxy")
	var cm corev1.ConfigMap
	getJSON(c, &cm, "-n", "kube-system", "get", "configmap", "svcproxy")
	ctr := ds.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	var environ []string
	for _, e := range ctr.Env {
		v := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			v = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			v = "node"
		case e.ValueFrom != nil:
			t.Fatalf("daemonset svcproxy: env %s: a source this test does not know", e.Name)
		}
		env[e.Name] = v
		environ = append(environ, e.Name+"="+v)
	}
	// The kubelet expands $(VAR) in command and args from the container's env.
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	argv := append([]string{}, ctr.Command...)
	for _, a := range ctr.Args {
		argv = append(argv, ref.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		}))
	}
	t.Logf("the image's svcproxy: %s (env %s)", strings.Join(argv, " "), strings.Join(environ, " "))

	// What the kubelet mounts for the ServiceAccount: a token, the cluster's
	// CA, the namespace.
	sa := filepath.Join(root, "var/run/secrets/kubernetes.io/serviceaccount")
	if err := os.MkdirAll(sa, 0o755); err != nil {
		t.Fatal(err)
	}
	token := c.svclab("kubectl", "-n", "kube-system", "create", "token", "svcproxy")
	ca, err := os.ReadFile(filepath.Join(lab.DefaultStateDir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string][]byte{"token": []byte(strings.TrimSpace(token)), "ca.crt": ca, "namespace": []byte("kube-system")} {
		if err := os.WriteFile(filepath.Join(sa, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.l.Cluster().Daemons().StopProxy(ctx); err != nil {
		t.Fatal(err)
	}
	// A container as a runtime makes one, in the node's network namespace: a
	// mount namespace of its own (private, gone with the process) with the
	// machine's /dev and a /proc mounted into the image's root, then chroot.
	const container = `root=$1; shift; mount --rbind /dev "$root/dev" && mount -t proc proc "$root/proc" && exec chroot "$root" "$@"`
	cmd := exec.Command("ip", append([]string{"netns", "exec", "svclab-node",
		"unshare", "--mount", "--propagation", "private", "sh", "-c", container, "sh", root}, argv...)...)
	cmd.Env = append(environ, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	logPath := filepath.Join(t.TempDir(), "svcproxy.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("the image's svcproxy log:\n%s", b)
		}
	}()
	// The liveness probe's address: the DaemonSet's --healthz-bind-address.
	c.eventually("the image's svcproxy /healthz", func() (bool, string) {
		select {
		case err := <-done:
			done <- err
			b, _ := os.ReadFile(logPath)
			t.Fatalf("the image's svcproxy exited: %v\n%s", err, b)
		default:
		}
		code, err := nodeGet(c, "http://127.0.0.1:10256/healthz")
		return err == nil && code == http.StatusOK, fmt.Sprintf("status %d, %v", code, err)
	})
	c.eventually("web served through the image's svcproxy", c.servedBy("web", 12, "web-0", "web-1", "web-2"))
	c.eventually("kube-dns through the image's svcproxy", c.resolvesTo("web.default.svc.cluster.local", "198.18.0.20"))
}

// unpackImage builds the image archive and unpacks its root filesystem,
// checking the archive with go-containerregistry's validate.Image on the way.
func unpackImage(c *cpLab) string {
	t := c.t
	dir := t.TempDir()
	// `make image` builds ./cmd/... at the module's root, two levels up.
	wd, _ := os.Getwd()
	if err := os.Chdir(filepath.Join(wd, "..", "..")); err != nil {
		t.Fatal(err)
	}
	bins, err := image.BuildBinaries(dir, "svcproxy", "clusterdns")
	os.Chdir(wd)
	if err != nil {
		t.Fatal(err)
	}
	img, err := image.Build(image.Config{Binaries: bins})
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "svcproxy-image.tar")
	if err := image.WriteArchive(archive, img, image.DefaultRef); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(image.DefaultRef)
	loaded, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(loaded); err != nil {
		t.Fatalf("validate.Image: %v", err)
	}
	if fi, err := os.Stat(archive); err == nil {
		t.Logf("image %s: %.1f MB", image.DefaultRef, float64(fi.Size())/1e6)
	}
	root := filepath.Join(dir, "rootfs")
	if err := image.Unpack(loaded, root); err != nil {
		t.Fatal(err)
	}
	return root
}

// getJSON reads one object with the lab's kubectl.
func getJSON(c *cpLab, into any, args ...string) {
	c.t.Helper()
	out := c.svclab(append([]string{"kubectl"}, append(args, "-o", "json")...)...)
	if err := json.Unmarshal([]byte(out), into); err != nil {
		c.t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
}

// nodeGet GETs url from inside the node's namespace.
func nodeGet(c *cpLab, url string) (int, error) {
	out, err := exec.Command("ip", "netns", "exec", "svclab-node", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", url).Output()
	if err != nil {
		return 0, err
	}
	var code int
	_, err = fmt.Sscan(string(out), &code)
	return code, err
}
