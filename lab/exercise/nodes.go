package exercise

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/lab/views"
)

// The checks of the labs beyond one node's svcproxy: the IPVS VM
// (tutorial 07), the real node (11) and the kubeadm cluster (13). Each
// reads the kernel or the cluster itself, as the learner's own commands
// there would (ipvsadm -Ln, kubectl, curl .../proxyMode).

// IPVSLab is a lab whose node's IPVS a check reads (lab.Lab).
type IPVSLab interface {
	Lab
	// IPVS calls read with the node's IPVS, as ipvsadm reads it (netlink,
	// from inside the node's network namespace).
	IPVS(ctx context.Context, read func(kipvs.Interface) error) error
}

// ClusterLab is a lab whose API server and nodes a check reads (lab.Lab
// with a control plane: the real node, the kubeadm cluster).
type ClusterLab interface {
	Lab
	// Client is a clientset for the lab's API server, as its administrator.
	Client() (kubernetes.Interface, error)
	// ProxyGet GETs path from the metrics server of the proxy on node
	// (svcproxy's or kube-proxy's, 127.0.0.1:10249 there), from inside it.
	ProxyGet(ctx context.Context, node, path string) (string, error)
}

// checkWebWeighted, tutorial 07's: web's virtual server schedules with
// wrr, and web-0 weighs three times each of the two other pods, so it gets
// three of every five new connections.
func checkWebWeighted(ctx context.Context, l Lab) (Result, error) {
	v, err := l.Services(ctx)
	if err != nil {
		return Result{}, err
	}
	web, ok := port(v, "default/web:http")
	if !ok || len(web.VIPs) == 0 {
		return Result{Saw: "the lab has no Service web", Hint: "bring the lab up again: svclab up --mode ipvs"}, nil
	}
	if v.Mode != "ipvs" {
		return Result{Saw: "svcproxy runs " + v.Mode + " mode, which puts nothing in IPVS",
			Hint: "the task is IPVS's: in the VM of lab 07 (make lab-ipvs-shell), svclab mode ipvs"}, nil
	}
	il, ok := l.(IPVSLab)
	if !ok {
		return Result{}, errors.New("this lab cannot read the node's IPVS")
	}
	vip, err := netip.ParseAddr(web.VIPs[0])
	if err != nil {
		return Result{}, fmt.Errorf("web's ClusterIP: %w", err)
	}
	key := kipvs.Key{Protocol: kipvs.Protocol(strings.ToUpper(web.Protocol)), Addr: netip.AddrPortFrom(vip, web.Port)}
	var vs *kipvs.VirtualServer
	var reals []kipvs.RealServer
	err = il.IPVS(ctx, func(ipvs kipvs.Interface) error {
		vss, err := ipvs.VirtualServers(ctx)
		if err != nil {
			return err
		}
		for i := range vss {
			if vss[i].Key == key {
				vs = &vss[i]
				reals, err = ipvs.RealServers(ctx, key)
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("the node's IPVS: %w", err)
	}
	if vs == nil {
		return Result{Saw: "IPVS has no virtual server " + key.String() + " for web",
			Hint: "svcproxy has not written web's virtual server: its log says why (svclab exec node -- tail /run/svclab/svcproxy.log)"}, nil
	}
	// Each real server's weight, by pod.
	pods := map[string]string{}
	for _, e := range web.Endpoints {
		pods[e.Addr] = e.Pod
	}
	slices.SortFunc(reals, func(a, b kipvs.RealServer) int { return a.Addr.Compare(b.Addr) })
	weight := map[string]int{}
	var saw []string
	for _, rs := range reals {
		name := pods[rs.Addr.String()]
		if name == "" {
			name = rs.Addr.String()
		}
		weight[name] = rs.Weight
		saw = append(saw, fmt.Sprintf("%s weight %d", name, rs.Weight))
	}
	now := fmt.Sprintf("web's virtual server %s schedules with %s; its real servers: %s", key, vs.Scheduler, strings.Join(saw, ", "))
	w0, w1, w2 := weight["web-0"], weight["web-1"], weight["web-2"]
	switch {
	case len(reals) != 3 || w1 == 0 || w2 == 0:
		return Result{Saw: now, Hint: "the task keeps all three pods in web, each with a share: `svclab pod NAME --ready=true` brings one back"}, nil
	case vs.Scheduler != "wrr" && w0 == w1 && w1 == w2:
		return Result{Saw: now, Hint: "which scheduler takes the real servers in turn, by their weights? And how does a Service give one of them more weight? (the Schedulers section; the lab's Services are in /run/svclab/services.yaml, which svcproxy reloads)"}, nil
	case vs.Scheduler != "wrr":
		return Result{Saw: now, Hint: "the weights are there, but " + vs.Scheduler + " does not take the real servers in turn by weight: which scheduler does? (the annotation svcproxy.io/ipvs-scheduler names it for web alone)"}, nil
	case w0 == w1 && w1 == w2:
		return Result{Saw: now, Hint: "wrr with equal weights is rr: give web-0 more weight than the others with the annotation svcproxy.io/ipvs-weights on web"}, nil
	case w1 != w2 || w0 != 3*w1:
		return Result{Saw: now, Hint: fmt.Sprintf("wrr gives each real server its weight's share of the sum: web-0 gets %d of every %d; three of every five is web-0 weighing three times each of the others", w0, w0+w1+w2)}, nil
	}
	return Result{Done: true, Saw: now + ": wrr sends web-0 three of every five new connections"}, nil
}

// checkThreeDNSPods, tutorial 11's: the cluster DNS's Deployment asks for
// three pods, and kube-dns's dns port has three ready endpoints, each a pod
// the kubelet started on the node (so an address of cni0's range).
func checkThreeDNSPods(ctx context.Context, l Lab) (Result, error) {
	_, client, err := clusterClient(l)
	if err != nil {
		return Result{}, err
	}
	dep, err := client.AppsV1().Deployments("kube-system").Get(ctx, "clusterdns", metav1.GetOptions{})
	if err != nil {
		return Result{Saw: "the cluster has no Deployment kube-system/clusterdns: " + err.Error(),
			Hint: "bring the lab up again: svclab up --kubelet --mode iptables"}, nil
	}
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	// A pod the Deployment has just made is ready, and in kube-dns's
	// EndpointSlice, a moment after it starts: wait for it a while.
	var v *views.ServicesView
	var ready []string
	for start := time.Now(); ; {
		if v, err = l.Services(ctx); err != nil {
			return Result{}, err
		}
		dns, ok := port(v, "kube-system/kube-dns:dns/UDP")
		if !ok {
			return Result{Saw: "the cluster has no Service kube-system/kube-dns", Hint: "bring the lab up again: svclab up --kubelet --mode iptables"}, nil
		}
		ready = nil
		for _, e := range dns.Endpoints {
			if e.Ready {
				ready = append(ready, strings.TrimSuffix(e.Addr, ":53"))
			}
		}
		if want != 3 || len(ready) >= 3 || time.Since(start) > podPatience {
			break
		}
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	now := fmt.Sprintf("Deployment clusterdns asks for %d pods; kube-dns's dns port has %d ready endpoints (%s), svcproxy serves it in %s mode",
		want, len(ready), strings.Join(ready, ", "), v.Mode)
	switch {
	case want < 3:
		return Result{Saw: now, Hint: "the clusterdns pods belong to a Deployment: which of its fields says how many pods run? (svclab kubectl -n kube-system get deployments; kubectl scale)"}, nil
	case want > 3:
		return Result{Saw: now, Hint: "the task asks for three pods, not more"}, nil
	case len(ready) < 3:
		return Result{Saw: now, Hint: "the Deployment asks for three, but not all are ready yet: the kubelet starts the new pod, the CNI plugin gives it an address, its readiness probe must pass (svclab kubectl -n kube-system get pods -o wide)"}, nil
	}
	return Result{Done: true, Saw: now + ": each query to 198.18.0.10 may go to any of the three"}, nil
}

// podPatience is how long checkThreeDNSPods waits for the pods the
// Deployment asks for to be ready.
var podPatience = 30 * time.Second

// kubeProxyMode reads the mode line of kube-proxy's config.conf, as kubeadm
// writes it (a KubeProxyConfiguration in YAML: one top-level "mode:").
var kubeProxyMode = regexp.MustCompile(`(?m)^mode: *"?([a-z]*)"?\s*$`)

// proxyPatience is how long checkNodesNftables waits for a node's proxy
// that does not answer yet: a pod the DaemonSet has just made starts its
// proxy, which answers /proxyMode once it has built its proxier.
var proxyPatience = 30 * time.Second

// checkNodesNftables, tutorial 13's: kube-proxy's ConfigMap says mode
// nftables, and the proxy on every node (kube-proxy or svcproxy, whichever
// the DaemonSet runs) answers /proxyMode with nftables.
func checkNodesNftables(ctx context.Context, l Lab) (Result, error) {
	cl, client, err := clusterClient(l)
	if err != nil {
		return Result{}, err
	}
	cm, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		return Result{Saw: "the cluster has no ConfigMap kube-system/kube-proxy: " + err.Error(), Hint: "bring the lab up again: svclab up --nodes 3"}, nil
	}
	configured := "iptables" // an empty mode is iptables on Linux
	if m := kubeProxyMode.FindStringSubmatch(cm.Data["config.conf"]); m != nil && m[1] != "" {
		configured = m[1]
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return Result{}, err
	}
	var names, saw, behind, silent []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	for _, n := range names {
		mode, err := proxyModeOf(ctx, cl, n)
		switch {
		case err != nil:
			silent = append(silent, n)
			saw = append(saw, n+" does not answer")
		case mode != "nftables":
			behind = append(behind, n)
			saw = append(saw, n+" "+mode)
		default:
			saw = append(saw, n+" "+mode)
		}
	}
	now := fmt.Sprintf("the ConfigMap kube-proxy says mode %s; /proxyMode on each node: %s", configured, strings.Join(saw, ", "))
	switch {
	case len(silent) > 0:
		return Result{Saw: now, Hint: "the proxy on " + strings.Join(silent, ", ") + " does not answer: is its pod running? (svclab kubectl -n kube-system get pods -l k8s-app=kube-proxy -o wide)"}, nil
	case configured != "nftables" && len(behind) > 0:
		return Result{Saw: now, Hint: "each pod of the DaemonSet reads its mode from the ConfigMap kube-system/kube-proxy (config.conf, mounted in the pod): change it there first"}, nil
	case configured != "nftables":
		return Result{Saw: now, Hint: "the proxies run nftables, but the next pod to start (a new node, a restarted pod) reads " + configured + " from the ConfigMap: change it there too"}, nil
	case len(behind) > 0:
		return Result{Saw: now, Hint: "the proxy on " + strings.Join(behind, ", ") + " still runs the mode it read when its pod started: a pod reads config.conf only then. What makes the DaemonSet start new ones?"}, nil
	}
	return Result{Done: true, Saw: now + ": every node's proxy read the new mode from the ConfigMap"}, nil
}

// proxyModeOf asks node's proxy its mode, and waits up to proxyPatience
// for one that does not answer yet.
func proxyModeOf(ctx context.Context, cl ClusterLab, node string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, proxyPatience)
	defer cancel()
	for {
		out, err := cl.ProxyGet(ctx, node, "/proxyMode")
		if err == nil {
			return strings.TrimSpace(out), nil
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(time.Second):
		}
	}
}

// clusterClient is the lab as a ClusterLab and its API server's client, for
// the checks that ask the cluster.
func clusterClient(l Lab) (ClusterLab, kubernetes.Interface, error) {
	cl, ok := l.(ClusterLab)
	if !ok {
		return nil, nil, errors.New("this lab has no API server to ask")
	}
	client, err := cl.Client()
	return cl, client, err
}
