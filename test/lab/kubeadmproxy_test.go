package lab

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/deploy"
	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/testbin"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
)

// TestRealNodeKubeadmProxy swaps kube-proxy for svcproxy as an operator of a
// kubeadm cluster does, on svclab's real node: kube-proxy's own objects as
// kubeadm v1.37.2 makes them (deploy/kubeadm: its ServiceAccount, RBAC,
// ConfigMap with the KubeProxyConfiguration, privileged DaemonSet), with
// only the image changed, replace deploy/realnode's svcproxy DaemonSet. The
// pod runs /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf
// --hostname-override=$(NODE_NAME) from svcproxy's image and serves
// Services to the lab's client. Then the mode is switched as courses teach
// it: `mode` edited in the ConfigMap, the k8s-app=kube-proxy pods deleted;
// the new pod's log (kube-proxy's "Using nftables Proxier") and /proxyMode
// say nftables, Services still answer, the node's rules are nftables mode's
// table and iptables mode's rules are gone.
func TestRealNodeKubeadmProxy(t *testing.T) {
	netnstest.RequireRoot(t, append(lab.DemoTools, append(cluster.NodeTools, "nft")...)...)
	kapitest.NodeBinaries(t) // skips, with advice, when `make node-bins` has not built them
	// runc-capbound beside svclab: the DaemonSet is privileged (docs/kind.md).
	bin := testbin.Build(t, "./cmd/svclab", "./cmd/svcproxy", "./cmd/clusterdns", "./cmd/runc-capbound")
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
	// up: the control plane, then the node's pods Ready (lab/cluster's
	// nodeReadyTimeout, 4 minutes) on a machine other builds load.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if out, err := svclab(ctx, bin, "--bin", bin, "up", "--kubelet", "--mode", "iptables"); err != nil {
		t.Fatalf("svclab up --kubelet: %v\n%s", err, out)
	}

	// The swap: deploy/realnode's DaemonSet out, kubeadm's objects in.
	dir := t.TempDir()
	if err := deploy.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	c.svclab("kubectl", "-n", "kube-system", "delete", "daemonset", "svcproxy", "--wait=true")
	start := time.Now()
	c.svclab("kubectl", "apply", "--server-side", "-k", filepath.Join(dir, "kubeadm"))
	c.svclab("kubectl", "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=3m")
	t.Logf("kube-proxy's DaemonSet rolled out with svcproxy's image in %s", time.Since(start).Round(time.Millisecond))

	c.proxyRuns("iptables")
	logs := c.svclab("kubectl", "-n", "kube-system", "logs", "-l", "k8s-app=kube-proxy", "--tail=-1")
	for _, want := range []string{
		`msg="using kube-proxy's configuration file" file=/var/lib/kube-proxy/config.conf mode=iptables`,
		`msg="Using iptables Proxier"`,
		`msg="KubeProxyConfiguration field ignored" field=conntrack.maxPerCore value=32768`,
		`source="kubeconfig /var/lib/kube-proxy/kubeconfig.conf"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("kube-proxy's pod's log lacks %s:\n%s", want, logs)
		}
	}

	// The course's switch: edit the ConfigMap's mode, delete the pods.
	cm := c.svclab("kubectl", "-n", "kube-system", "get", "configmap", "kube-proxy", "-o", "yaml")
	edited := regexp.MustCompile(`(?m)^(\s+)mode: iptables$`).ReplaceAllString(cm, "${1}mode: nftables")
	if edited == cm {
		t.Fatalf("the kube-proxy ConfigMap has no `mode: iptables` line:\n%s", cm)
	}
	apply := exec.Command(filepath.Join(bin, "svclab"), "kubectl", "apply", "-f", "-")
	apply.Stdin = strings.NewReader(edited)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply the edited ConfigMap: %v\n%s", err, out)
	}
	c.svclab("kubectl", "-n", "kube-system", "delete", "pods", "-l", "k8s-app=kube-proxy", "--wait=true")
	c.svclab("kubectl", "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=3m")
	c.proxyRuns("nftables")
	c.eventually("the new pod's log says nftables", func() (bool, string) {
		out, err := svclabOut(bin, "kubectl", "-n", "kube-system", "logs", "-l", "k8s-app=kube-proxy", "--tail=-1")
		return err == nil && strings.Contains(out, `msg="Using nftables Proxier"`) &&
			strings.Contains(out, `msg="svcproxy starting" mode=nftables`), out
	})
	// The node's rules are nftables mode's: its table, holding the
	// ClusterIPs the client just reached, and no iptables chains of svcproxy.
	if out, err := exec.Command("ip", "netns", "exec", "svclab-node", "iptables-save", "-t", "nat").Output(); err != nil || strings.Contains(string(out), ":SVCP-") {
		t.Errorf("after the switch to nftables, iptables mode's SVCP- chains remain (%v):\n%s", err, out)
	}
	out, err := exec.Command("ip", "netns", "exec", "svclab-node", "nft", "list", "table", "ip", "svcproxy").CombinedOutput()
	if err != nil {
		t.Fatalf("after the switch to nftables: nft list table ip svcproxy: %v\n%s", err, out)
	}
	for _, ip := range []string{"198.18.0.1", "198.18.0.10"} {
		if !strings.Contains(string(out), ip) {
			t.Errorf("nftables mode's table lacks the ClusterIP %s:\n%s", ip, out)
		}
	}
}

// proxyRuns waits until the node's svcproxy says mode on /proxyMode and
// the lab's client reaches two ClusterIP Services through it: kubernetes
// (the API server on the node) and kube-dns's metrics port (clusterdns's
// pods).
func (c *cpLab) proxyRuns(mode string) {
	c.t.Helper()
	c.eventually("/proxyMode says "+mode, func() (bool, string) {
		out, err := exec.Command("ip", "netns", "exec", "svclab-node", "curl", "-s", "--max-time", "2", "http://127.0.0.1:10249/proxyMode").Output()
		return err == nil && strings.TrimSpace(string(out)) == mode, fmt.Sprintf("%q %v", out, err)
	})
	for _, url := range []string{"https://198.18.0.1/readyz", "http://198.18.0.10:9153/healthz"} {
		c.eventually(mode+": GET "+url+" from the client", func() (bool, string) {
			out, err := exec.Command("ip", "netns", "exec", "svclab-client", "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", url).Output()
			return err == nil && string(out) == "200", fmt.Sprintf("%q %v", out, err)
		})
	}
}

// svclabOut runs svclab, for a condition polled until it holds.
func svclabOut(bin string, args ...string) (string, error) {
	out, err := exec.Command(filepath.Join(bin, "svclab"), args...).CombinedOutput()
	return string(out), err
}
