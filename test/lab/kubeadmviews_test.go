package lab

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/svcproxy/svcproxy/lab/cluster"
)

// webShowsNodes checks `svclab web` on the kubeadm cluster: /api/state has
// the three nodes, the control plane first, and each of web's pods (nodeOf:
// pod name to node) on its node; the page, in a headless chromium when
// there is one, draws each pod in its node's box.
func webShowsNodes(t *testing.T, bin string, nodeOf map[string]string) {
	url := startWeb(t, bin)
	var st struct {
		Nodes []cluster.NodeView `json:"nodes"`
		Error string             `json:"error"`
	}
	onItsNode := func() bool {
		if len(st.Nodes) != 3 || st.Nodes[0].Name != "node" || st.Nodes[0].Role != "control-plane" {
			return false
		}
		seen := map[string]string{}
		for _, n := range st.Nodes {
			for _, p := range n.Pods {
				seen[p.FullName()] = n.Name
			}
		}
		for pod, node := range nodeOf {
			if seen["default/"+pod] != node {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st.Nodes = nil
		if getJSONURL(t, url+"api/state", &st) == http.StatusOK && onItsNode() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/api/state: nodes %+v (error %q), want node, worker1, worker2 with web's pods %v", st.Nodes, st.Error, nodeOf)
		}
	}
	chromium := findChromium()
	if chromium == "" {
		t.Log("no chromium: the page's drawing of the nodes is checked by lab/web's TestPageNodes only")
		return
	}
	var checks []string
	for pod, node := range nodeOf {
		checks = append(checks, fmt.Sprintf(`!!document.querySelector('#nodes .node[data-node="%s"] li.pod[data-pod="default/%s"]')`, node, pod))
	}
	p := newPage(t, chromium)
	p.step("load the page", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`#nodes .node[data-node="worker2"]`)))
	p.waitFor("each of web's pods in its node's box", strings.Join(checks, " && "))
}

// rulesAndTraceOnAWorker checks `svclab rules --node` and `svclab trace
// --node` on worker1 while svcproxy serves (iptables mode): web's chains
// in worker1's kernel; a packet worker1 sends itself to the ClusterIP,
// DNATed there; a packet from the outside host to worker1's NodePort,
// arriving over the switch and masqueraded; and a packet from the client
// to the ClusterIP refused with where to look instead (node's rules).
func rulesAndTraceOnAWorker(t *testing.T, c *cpLab, clusterIP string) {
	words := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	out := words(c.svclab("rules", "--node", "worker1", "web"))
	for _, want := range []string{"SVCP-SERVICES", "default/web", clusterIP} {
		if !strings.Contains(out, want) {
			t.Errorf("svclab rules --node worker1 web: no %q in\n%s", want, out)
		}
	}
	out = words(c.svclab("trace", "--node", "worker1", "worker1", "web"))
	for _, want := range []string{"from the node itself (198.19.0.2)", "DNAT 198.19."} {
		if !strings.Contains(out, want) {
			t.Errorf("svclab trace --node worker1 worker1 web: no %q in\n%s", want, out)
		}
	}
	out = words(c.svclab("trace", "--node", "worker1", "outside", "198.19.0.2:30080"))
	for _, want := range []string{"default/web-nodeport", "from outside (198.19.200.2), arriving at the node on eth0", "MASQUERADE"} {
		if !strings.Contains(out, want) {
			t.Errorf("svclab trace --node worker1 outside 198.19.0.2:30080: no %q in\n%s", want, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, err := svclab(ctx, c.bin, "trace", "--node", "worker1", "client", "web")
	if out := words(raw); err == nil || !strings.Contains(out, "client's packets meet node's rules first") || !strings.Contains(out, "--node node") {
		t.Errorf("svclab trace --node worker1 client web: %v, want a refusal naming node's rules and --node node:\n%s", err, out)
	}
}

// execOnANode checks `svclab exec` on a worker sees the node's own
// resolv.conf and /etc/hosts, not the machine's: the nodes by name, and a
// Service's name that does not resolve on a node, said at once.
func execOnANode(t *testing.T, c *cpLab) {
	if out := c.svclab("exec", "worker1", "--", "cat", "/etc/resolv.conf"); !strings.Contains(out, "nameserver 198.19.0.2\n") {
		t.Errorf("svclab exec worker1 -- cat /etc/resolv.conf: want the node's own address as its resolver:\n%s", out)
	}
	if out := c.svclab("exec", "worker1", "--", "getent", "hosts", "worker2"); !strings.Contains(out, "198.19.0.3") {
		t.Errorf("svclab exec worker1 -- getent hosts worker2: want 198.19.0.3:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := svclab(ctx, c.bin, "exec", "worker1", "--", "curl", "-sS", "--max-time", "30", "http://web/")
	if err == nil || !strings.Contains(out, "Could not resolve host") {
		t.Errorf("svclab exec worker1 -- curl http://web/: %v, want a name that does not resolve on a node:\n%s", err, out)
	}
}

// socketLBOnTheNodes checks socklb mode on the kubeadm cluster while
// svcproxy serves: `svclab mode socklb` says the DaemonSet rolled its pods
// (none deleted) and every node reaches web; `svclab rules --node worker1
// web` lists worker1's own socket LB maps (web's ClusterIP, a slot per
// pod), pinned in its bpffs, in its mount namespace, and attached at its
// kubelet's cgroup root, and `svclab rules web` the control-plane node's;
// `svclab trace --node worker1 worker1 web` says worker1's own processes
// meet no socket hook, walks a pod's connect() over worker1's maps, then
// the packet through worker1's nftables path. Then back to iptables mode:
// the pins removed, the pod template kubeadm's again.
func socketLBOnTheNodes(t *testing.T, c *cpLab, clusterIP string, reach func(*testing.T, string)) {
	words := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	out := c.svclabLong("mode", "socklb")
	for _, want := range []string{"svcproxy runs in socklb mode on every node", "pod template given", "none deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("svclab mode socklb: no %q in %q", want, out)
		}
	}
	reach(t, "svcproxy (socklb)")
	c.t = t
	for _, node := range []string{"worker1", "node"} {
		args := []string{"rules", "web"}
		if node != "node" {
			args = append(args, "--node", node)
		}
		var out string
		c.eventually("svclab "+strings.Join(args, " ")+" lists web's three pods", func() (bool, string) {
			out = words(c.svclab(args...))
			return strings.Contains(out, "slot 2 ->"), out
		})
		for _, want := range []string{
			"attached at /run/svclab-cgroup2/svclab/" + node + ";",
			"pinned in /sys/fs/bpf/svcproxy (" + node + "'s own bpffs, in its mount namespace)",
			clusterIP + ":80/TCP id",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("svclab %s: no %q in\n%s", strings.Join(args, " "), want, out)
			}
		}
	}
	out = words(c.svclab("trace", "--node", "worker1", "worker1", "web"))
	for _, want := range []string{
		"worker1's processes are not in worker1's kubelet's cgroup root",
		"What runs there are worker1's pods",
		"socket LB (cgroup connect4):",
		"rewritten to 198.19.",
		"DNAT 198.19.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("svclab trace --node worker1 worker1 web: no %q in\n%s", want, out)
		}
	}
	out = c.svclabLong("mode", "iptables")
	for _, want := range []string{"svcproxy runs in iptables mode on every node", "socklb's pins removed in every node", "back to kubeadm's", "none deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("svclab mode iptables: no %q in %q", want, out)
		}
	}
}
