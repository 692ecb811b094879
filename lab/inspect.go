package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// This file holds what `svclab rules`, `svclab trace` and `svclab conntrack`
// share: the Services the lab serves, and commands run in the node.

// Snapshot is what svcproxy serves now: in the control-plane lab, the API
// server's Services and EndpointSlices; otherwise the lab's manifests file as
// it is on disk (a student may have edited it), read as svcproxy reads it.
func (l *Lab) Snapshot(ctx context.Context) (*service.Snapshot, error) {
	st, err := l.net.ReadState()
	if err != nil {
		return nil, err
	}
	if st.Kubectl != "" {
		c, err := l.Client()
		if err != nil {
			return nil, err
		}
		svcs, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list Services: %w", err)
		}
		slices, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list EndpointSlices: %w", err)
		}
		var ss []*v1.Service
		for i := range svcs.Items {
			ss = append(ss, &svcs.Items[i])
		}
		var es []*discoveryv1.EndpointSlice
		for i := range slices.Items {
			es = append(es, &slices.Items[i])
		}
		return service.Build(ss, es, nil), nil
	}
	b, err := os.ReadFile(l.ManifestsPath())
	if err != nil {
		return nil, err
	}
	return watch.SnapshotOf(l.ManifestsPath(), b)
}

// FindService finds a Service by "NAME" (namespace default) or
// "NAMESPACE/NAME".
func FindService(snap *service.Snapshot, name string) (*service.Service, error) {
	ns, n, ok := strings.Cut(name, "/")
	if !ok {
		ns, n = "default", name
	}
	if s, ok := snap.Service(service.NamespacedName{Namespace: ns, Name: n}); ok {
		return s, nil
	}
	var names []string
	for _, s := range snap.Services() {
		if s.NamespacedName.Namespace == "default" {
			names = append(names, s.NamespacedName.Name)
		} else {
			names = append(names, s.NamespacedName.String())
		}
	}
	sort.Strings(names)
	return nil, fmt.Errorf("service %q: no such Service (the lab has %s)", name, strings.Join(names, ", "))
}

// FindPort picks one port of s: by name or number (port ""): the only port,
// or the first TCP one.
func FindPort(s *service.Service, port string) (*service.Port, error) {
	if len(s.Ports) == 0 {
		return nil, fmt.Errorf("service %s has no ports", s.NamespacedName)
	}
	if port == "" {
		for _, p := range s.Ports {
			if p.Protocol == service.TCP {
				return p, nil
			}
		}
		return s.Ports[0], nil
	}
	n, numErr := strconv.ParseUint(port, 10, 16)
	var names []string
	for _, p := range s.Ports {
		if p.Name.Port == port || (numErr == nil && uint64(p.Port) == n) {
			return p, nil
		}
		names = append(names, fmt.Sprintf("%s (%d/%s)", p.Name.Port, p.Port, p.Protocol))
	}
	return nil, fmt.Errorf("service %s: port %q: no such port (it has %s)", s.NamespacedName, port, strings.Join(names, ", "))
}

// describeService is the one-line heading of a Service: its type, addresses
// and ports.
func describeService(s *service.Service) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", s.NamespacedName, s.Type)
	switch {
	case s.Headless:
		b.WriteString(", headless (no ClusterIP: nothing to proxy)")
	case s.ExternalName != "":
		fmt.Fprintf(&b, " %s (a DNS alias: nothing to proxy)", s.ExternalName)
	default:
		for _, ip := range s.ClusterIPs {
			b.WriteString(" " + ip.String())
		}
	}
	for _, p := range s.Ports {
		fmt.Fprintf(&b, ", port %s %d/%s", p.Name.Port, p.Port, p.Protocol)
		if p.NodePort != 0 {
			fmt.Fprintf(&b, " (NodePort %d)", p.NodePort)
		}
	}
	if s.Affinity.ClientIP {
		fmt.Fprintf(&b, ", sessionAffinity ClientIP (%s)", s.Affinity.Timeout)
	}
	if s.ExternalPolicyLocal {
		b.WriteString(", externalTrafficPolicy Local")
	}
	return b.String()
}

// nodeAddrs are the node's IPv4 addresses (`ip -j addr`), loopback and, in
// IPVS mode, the Service addresses on svcp-ipvs0 included: what the kernel
// calls local.
func (l *Lab) nodeAddrs(ctx context.Context) ([]netip.Addr, error) {
	out, err := l.net.NodeOutput(ctx, "ip", "-j", "-4", "addr")
	if err != nil {
		return nil, err
	}
	var links []struct {
		AddrInfo []struct {
			Local string `json:"local"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		return nil, fmt.Errorf("ip -j addr in the node: %w", err)
	}
	seen := map[netip.Addr]bool{}
	var addrs []netip.Addr
	for _, ln := range links {
		for _, a := range ln.AddrInfo {
			if ip, err := netip.ParseAddr(a.Local); err == nil && !seen[ip] {
				seen[ip] = true
				addrs = append(addrs, ip)
			}
		}
	}
	return addrs, nil
}
