package exercise

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/lab/views"
)

// ipvsLab is the IPVS VM's lab: web in mode, its virtual server in a fake
// IPVS with scheduler sched and the pods' weights.
type ipvsLab struct {
	fakeLab
	ipvs *kipvs.Fake
}

func (l ipvsLab) IPVS(_ context.Context, read func(kipvs.Interface) error) error { return read(l.ipvs) }

func newIPVSLab(t *testing.T, mode, sched string, weights ...int) ipvsLab {
	t.Helper()
	l := lab(mode, "ready", mode)
	f := kipvs.NewFake()
	key := kipvs.Key{Protocol: "TCP", Addr: netip.MustParseAddrPort("198.18.0.20:80")}
	l.v.Ports[0].VIPs, l.v.Ports[0].Port, l.v.Ports[0].Protocol = []string{"198.18.0.20"}, 80, "TCP"
	if mode == "ipvs" {
		if err := f.AddVirtualServer(t.Context(), kipvs.VirtualServer{Key: key, Scheduler: sched}); err != nil {
			t.Fatal(err)
		}
		for i, w := range weights {
			rs := kipvs.RealServer{Addr: netip.MustParseAddrPort(fmt.Sprintf("198.19.1.%d:8080", 10+i)), Weight: w}
			if err := f.AddRealServer(t.Context(), key, rs); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ipvsLab{l, f}
}

func TestIPVSCheck(t *testing.T) {
	e, err := Find("07")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		lab  ipvsLab
		done bool
		hint string
	}{
		{newIPVSLab(t, "ipvs", "wrr", 3, 1, 1), true, ""},
		{newIPVSLab(t, "ipvs", "wrr", 6, 2, 2), true, ""},
		{newIPVSLab(t, "ipvs", "sh", 1, 1, 1), false, "which scheduler takes the real servers in turn"},
		{newIPVSLab(t, "ipvs", "rr", 3, 1, 1), false, "rr does not take the real servers in turn by weight"},
		{newIPVSLab(t, "ipvs", "wrr", 1, 1, 1), false, "wrr with equal weights is rr"},
		{newIPVSLab(t, "ipvs", "wrr", 3, 2, 1), false, "web-0 gets 3 of every 6"},
		{newIPVSLab(t, "ipvs", "wrr", 3, 1), false, "keeps all three pods"},
		{newIPVSLab(t, "iptables", ""), false, "svclab mode ipvs"},
	} {
		r, err := e.Check(t.Context(), tt.lab)
		if err != nil {
			t.Fatal(err)
		}
		if r.Done != tt.done || r.Saw == "" || !strings.Contains(r.Hint, tt.hint) || (r.Done && r.Hint != "") {
			t.Errorf("IPVS %s: %+v; want done %v with a hint containing %q", tt.lab.ipvs.Dump(), r, tt.done, tt.hint)
		}
	}
	// A lab that has no IPVS to read is an error, not an undone task.
	if _, err := e.Check(t.Context(), newIPVSLab(t, "ipvs", "wrr", 3, 1, 1).fakeLab); err == nil {
		t.Error("the check read IPVS from a lab without it")
	}
}

// clusterLab is a lab with an API server (a fake clientset) and a proxy
// on each node answering /proxyMode with modes[node] ("" answers
// nothing).
type clusterLab struct {
	fakeLab
	client kubernetes.Interface
	modes  map[string]string
}

func (l clusterLab) Client() (kubernetes.Interface, error) { return l.client, nil }

func (l clusterLab) ProxyGet(_ context.Context, node, path string) (string, error) {
	if path != "/proxyMode" || l.modes[node] == "" {
		return "", errors.New("connection refused")
	}
	return l.modes[node] + "\n", nil
}

// kubeadmLab: the ConfigMap kube-proxy's config.conf says configured, and
// each node's proxy runs its mode in modes.
func kubeadmLab(configured string, modes map[string]string) clusterLab {
	objs := []runtime.Object{&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
		Data: map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: " + configured + "\nnftables:\n  syncPeriod: 30s\n"}}}
	for n := range modes {
		objs = append(objs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return clusterLab{client: fake.NewClientset(objs...), modes: modes}
}

func TestKubeadmModeCheck(t *testing.T) {
	proxyPatience = 0
	e, err := Find("13")
	if err != nil {
		t.Fatal(err)
	}
	all := func(m string) map[string]string { return map[string]string{"node": m, "worker1": m, "worker2": m} }
	for _, tt := range []struct {
		lab  clusterLab
		done bool
		hint string
	}{
		{kubeadmLab("nftables", all("nftables")), true, ""},
		{kubeadmLab("iptables", all("iptables")), false, "reads its mode from the ConfigMap"},
		{kubeadmLab("nftables", all("iptables")), false, "on node, worker1, worker2 still runs the mode it read when its pod started"},
		{kubeadmLab("", all("iptables")), false, "reads its mode from the ConfigMap"},
		{kubeadmLab("iptables", all("nftables")), false, "the next pod to start"},
		{kubeadmLab("nftables", map[string]string{"node": "nftables", "worker1": "", "worker2": "nftables"}), false, "on worker1 does not answer"},
	} {
		r, err := e.Check(t.Context(), tt.lab)
		if err != nil {
			t.Fatal(err)
		}
		if r.Done != tt.done || !strings.Contains(r.Saw, "worker2") || !strings.Contains(r.Hint, tt.hint) || (r.Done && r.Hint != "") {
			t.Errorf("%v: %+v; want done %v with a hint containing %q", tt.lab.modes, r, tt.done, tt.hint)
		}
	}
}

// realNodeLab: the Deployment clusterdns asks for replicas pods, and
// kube-dns's dns port has an endpoint per state in eps.
func realNodeLab(replicas int32, eps ...bool) clusterLab {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "clusterdns"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas}}
	var ends []views.EndpointView
	for i, ready := range eps {
		ends = append(ends, views.EndpointView{Addr: fmt.Sprintf("198.19.64.%d:53", 2+i), Ready: ready, Serving: ready})
	}
	v := &views.ServicesView{Mode: "iptables", Ports: []views.ServicePortView{{Name: "kube-system/kube-dns:dns/UDP", Path: "iptables", Endpoints: ends}}}
	return clusterLab{fakeLab: fakeLab{v}, client: fake.NewClientset(dep)}
}

func TestRealNodeCheck(t *testing.T) {
	podPatience = 0
	e, err := Find("11")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		lab  clusterLab
		done bool
		hint string
	}{
		{realNodeLab(3, true, true, true), true, ""},
		{realNodeLab(2, true, true), false, "which of its fields says how many pods run"},
		{realNodeLab(3, true, true, false), false, "not all are ready yet"},
		{realNodeLab(3, true, true), false, "not all are ready yet"},
		{realNodeLab(4, true, true, true, true), false, "not more"},
	} {
		r, err := e.Check(t.Context(), tt.lab)
		if err != nil {
			t.Fatal(err)
		}
		if r.Done != tt.done || !strings.Contains(r.Saw, "kube-dns's dns port has") || !strings.Contains(r.Saw, "198.19.64.2") || !strings.Contains(r.Hint, tt.hint) || (r.Done && r.Hint != "") {
			t.Errorf("%+v: %+v; want done %v with a hint containing %q", tt.lab.v.Ports[0].Endpoints, r, tt.done, tt.hint)
		}
	}
	if _, err := e.Check(t.Context(), realNodeLab(3).fakeLab); err == nil {
		t.Error("the check asked a lab without an API server")
	}
}
