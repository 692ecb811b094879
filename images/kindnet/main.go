// Command kindnet is the pod network of the kind node image (images/kindnode):
// what kindnetd's cni.go and routes.go do, in the DaemonSet of kind's CNI
// manifest. kindnetd itself (sigs.k8s.io/kind's images/kindnetd, a module of
// its own) is not served by the Go module proxy, so this program takes its
// place under the same manifest (docs/kind.md says what it leaves out).
//
// On its node, it watches the Nodes and
//
//   - for its own node (the one whose InternalIP is HOST_IP), writes
//     /etc/cni/net.d/10-kindnet.conflist, kindnetd's: the ptp plugin with
//     host-local addresses from the node's spec.podCIDRs, and portmap.
//     Until it exists the kubelet reports the node NotReady;
//   - for every other node, routes the node's pod ranges through its
//     InternalIP, so pods reach pods across nodes without NAT.
//
// It reaches the API server at CONTROL_PLANE_ENDPOINT when set (kind adds it
// to the DaemonSet: without kube-proxy the Service kubernetes answers only
// once svcproxy runs, which needs the nodes Ready), with the pod's
// ServiceAccount token.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// cniConfigPath is kindnetd's file.
const cniConfigPath = "/etc/cni/net.d/10-kindnet.conflist"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatalf("kindnet: %v", err)
	}
}

func run(ctx context.Context) error {
	hostIP := net.ParseIP(os.Getenv("HOST_IP"))
	if hostIP == nil {
		return fmt.Errorf("HOST_IP %q: not an IP address (the manifest sets it from status.hostIP)", os.Getenv("HOST_IP"))
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	if ep := os.Getenv("CONTROL_PLANE_ENDPOINT"); ep != "" {
		cfg.Host = "https://" + ep
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mtu := 0
	if eth0, err := net.InterfaceByName("eth0"); err == nil {
		mtu = eth0.MTU
	}
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	nodes := factory.Core().V1().Nodes()
	sync := func(any) {
		list, err := nodes.Lister().List(labels.Everything())
		if err != nil {
			log.Printf("kindnet: listing nodes: %v", err)
			return
		}
		for _, n := range list {
			if err := syncNode(n, hostIP, mtu); err != nil {
				log.Printf("kindnet: node %s: %v", n.Name, err)
			}
		}
	}
	nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    sync,
		UpdateFunc: func(_, n any) { sync(n) },
	})
	factory.Start(ctx.Done())
	log.Printf("kindnet: node %s, API server %s", hostIP, cfg.Host)
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

// syncNode writes the CNI configuration for the own node, routes for others.
func syncNode(n *corev1.Node, hostIP net.IP, mtu int) error {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	if len(cidrs) == 0 {
		return nil // kube-controller-manager has not given it a range yet
	}
	ip := internalIP(n)
	if ip == nil {
		return nil
	}
	if ip.Equal(hostIP) {
		return writeCNIConfig(cniConfigPath, cidrs, mtu)
	}
	for _, c := range cidrs {
		_, dst, err := net.ParseCIDR(c)
		if err != nil {
			return fmt.Errorf("spec.podCIDRs %q: %w", c, err)
		}
		if (dst.IP.To4() == nil) != (ip.To4() == nil) {
			continue // no route for a family the node has no address of
		}
		if err := netlink.RouteReplace(&netlink.Route{Dst: dst, Gw: ip}); err != nil {
			return fmt.Errorf("route %s via %s: %w", dst, ip, err)
		}
	}
	return nil
}

func internalIP(n *corev1.Node) net.IP {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return net.ParseIP(a.Address)
		}
	}
	return nil
}

// conflist is kindnetd's CNI configuration for cidrs: ptp with host-local
// addresses and a default route per family, then portmap.
func conflist(cidrs []string, mtu int) ([]byte, error) {
	var ranges [][]map[string]string
	var routes []map[string]string
	for _, c := range cidrs {
		ip, _, err := net.ParseCIDR(c)
		if err != nil {
			return nil, fmt.Errorf("spec.podCIDRs %q: %w", c, err)
		}
		ranges = append(ranges, []map[string]string{{"subnet": c}})
		if ip.To4() != nil {
			routes = append(routes, map[string]string{"dst": "0.0.0.0/0"})
		} else {
			routes = append(routes, map[string]string{"dst": "::/0"})
		}
	}
	ptp := map[string]any{
		"type":   "ptp",
		"ipMasq": false,
		"ipam": map[string]any{
			"type":    "host-local",
			"dataDir": "/run/cni-ipam-state",
			"routes":  routes,
			"ranges":  ranges,
		},
	}
	if mtu > 0 {
		ptp["mtu"] = mtu
	}
	return json.MarshalIndent(map[string]any{
		"cniVersion": "0.3.1",
		"name":       "kindnet",
		"plugins": []any{ptp, map[string]any{
			"type":         "portmap",
			"capabilities": map[string]bool{"portMappings": true},
		}},
	}, "", "  ")
}

// writeCNIConfig writes the file when its content changes, through a name
// CNI does not read and a rename, so the runtime never reads half of it.
func writeCNIConfig(path string, cidrs []string, mtu int) error {
	b, err := conflist(cidrs, mtu)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".temp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	log.Printf("kindnet: writing %s for %v", path, cidrs)
	return os.Rename(tmp, path)
}
