package web

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/lab/cluster"
)

func (f *fakeLab) Nodes(context.Context) ([]cluster.NodeView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]cluster.NodeView(nil), f.nodes...), nil
}

func (f *fakeLab) setNodes(nodes []cluster.NodeView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes = nodes
}

// threeNodes is the kubeadm cluster as the API server has it: web's pods
// on two workers, one of them not ready, kube-proxy on every node.
var threeNodes = []cluster.NodeView{
	{Name: "node", Role: "control-plane", Addr: "198.19.0.1", Ready: true, PodCIDR: "198.19.64.0/24",
		Taints: []string{cluster.ControlPlaneLabel + ":NoSchedule"},
		Pods: []cluster.PodView{
			{Namespace: "kube-system", Name: "etcd-node", IP: "198.19.0.1", HostNetwork: true, Phase: "Running", Ready: true, Owner: "Node/node"},
			{Namespace: "kube-system", Name: "kube-proxy-a", IP: "198.19.0.1", HostNetwork: true, Phase: "Running", Ready: true, Owner: "DaemonSet/kube-proxy"},
		}},
	{Name: "worker1", Role: "worker", Addr: "198.19.0.2", Ready: true, PodCIDR: "198.19.65.0/24", Pods: []cluster.PodView{
		{Namespace: "default", Name: "web-x", IP: "198.19.65.3", Phase: "Running", Ready: true, Owner: "ReplicaSet/web-1"},
		{Namespace: "kube-system", Name: "kube-proxy-b", IP: "198.19.0.2", HostNetwork: true, Phase: "Running", Ready: true, Owner: "DaemonSet/kube-proxy"},
	}},
	{Name: "worker2", Role: "worker", Addr: "198.19.0.3", Ready: false, PodCIDR: "198.19.66.0/24", Pods: []cluster.PodView{
		{Namespace: "default", Name: "web-y", IP: "198.19.66.2", Phase: "Running", Ready: false, Owner: "ReplicaSet/web-1"},
	}},
}

// TestStateCarriesNodes: /api/state has the cluster's nodes and their pods
// as the lab read them, none on a lab without a control plane, and keeps
// the last ones when a read fails.
func TestStateCarriesNodes(t *testing.T) {
	s, f, _, ts := newTestServer(t)
	var st State
	require.Equal(t, http.StatusOK, getJSON(t, ts.URL+"/api/state", &st))
	require.Empty(t, st.Nodes)

	f.setNodes(threeNodes)
	s.poll(t.Context())
	require.Equal(t, http.StatusOK, getJSON(t, ts.URL+"/api/state", &st))
	require.Equal(t, threeNodes, st.Nodes)

	f.setNodes(nil)
	s.cfg.Lab = failingNodes{f}
	s.poll(t.Context())
	st = State{}
	require.Equal(t, http.StatusOK, getJSON(t, ts.URL+"/api/state", &st))
	require.Equal(t, threeNodes, st.Nodes)
	require.Contains(t, st.Error, "the lab's API server: connection refused")
}

// failingNodes is a lab whose API server does not answer.
type failingNodes struct{ *fakeLab }

func (failingNodes) Nodes(context.Context) ([]cluster.NodeView, error) {
	return nil, errors.New("the lab's API server: connection refused")
}

// TestPageNodes opens the page in a headless chromium (test/lab's
// TestKubeadmCluster does it on the real three nodes): no nodes, no
// section; then each node drawn with its role, address, pod range and
// state, each pod in its node's box, kube-system's and not ready ones told
// apart.
func TestPageNodes(t *testing.T) {
	chromium := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	if chromium == "" {
		t.Skip("no chromium on PATH (scripts/install-deps.sh installs Debian's)")
	}
	s, f, _, ts := newTestServer(t)

	actx, acancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	waitFor := func(what, expr string) {
		t.Helper()
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
	defer scancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(ts.URL), chromedp.WaitVisible(chromedp.CSS(`[data-port="default/web:http"]`))); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	waitFor("no section without nodes", `document.getElementById('nodes-section').hidden && document.querySelectorAll('#nodes .node').length === 0`)

	f.setNodes(threeNodes)
	s.poll(t.Context())
	waitFor("three nodes, the control plane first", `!document.getElementById('nodes-section').hidden &&
		[...document.querySelectorAll('#nodes .node')].map((n) => n.dataset.node).join() === 'node,worker1,worker2'`)
	waitFor("each node's role, address, pod range and state", `(() => {
		const n = (name) => document.querySelector('#nodes .node[data-node="' + name + '"]');
		return n('node').classList.contains('control-plane') && n('node').querySelector('.role').textContent === 'control-plane' &&
			n('worker1').querySelector('.addr').textContent === '198.19.0.2, pods in 198.19.65.0/24' &&
			/NoSchedule/.test(n('node').querySelector('.taints').textContent) &&
			n('worker2').classList.contains('notready') && n('worker2').querySelector('.state').textContent === 'NotReady'; })()`)
	waitFor("each pod in its node's box", `(() => {
		const on = (node, pod) => !!document.querySelector('#nodes .node[data-node="' + node + '"] li.pod[data-pod="' + pod + '"]');
		return on('worker1', 'default/web-x') && on('worker2', 'default/web-y') && !on('worker1', 'default/web-y') &&
			on('node', 'kube-system/etcd-node') && on('worker1', 'kube-system/kube-proxy-b') &&
			document.querySelector('li.pod[data-pod="default/web-x"] .ip').textContent === '198.19.65.3' &&
			document.querySelector('li.pod[data-pod="kube-system/kube-proxy-b"] .ip').textContent === '198.19.0.2 (host network)'; })()`)
	waitFor("kube-system's pods and the not ready one told apart", `
		document.querySelector('li.pod[data-pod="kube-system/etcd-node"]').classList.contains('system') &&
		document.querySelector('li.pod[data-pod="default/web-x"]').classList.contains('workload') &&
		document.querySelector('li.pod[data-pod="default/web-y"]').classList.contains('notready') &&
		/made by ReplicaSet\/web-1/.test(document.querySelector('li.pod[data-pod="default/web-x"]').title)`)
}
