package views

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/knftables"

	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/service"
)

// Source is what the views read besides the node's kernel: the Services
// svcproxy serves, and what svcproxy says of itself.
type Source interface {
	// Snapshot is what svcproxy serves now.
	Snapshot(ctx context.Context) (*service.Snapshot, error)
	// Status is svcproxy's /status document: each service port's path and
	// counters.
	Status(ctx context.Context) (string, error)
}

// Config says what Views look at and where they write.
type Config struct {
	// Net is the lab whose node's kernel the views read.
	Net *topology.Net
	// Source gives the Services and svcproxy's status.
	Source Source
	// Stdout gets what the views print.
	Stdout io.Writer
	// SocketLB says where the node's socket LB runs, in socklb mode; nil
	// is the one-node lab's (LabSocketLB).
	SocketLB func() (SocketLB, error)
}

// Views read the node's kernel state (rules, conntrack, counters, the
// socket LB's maps) and show it: `svclab rules`, `svclab trace`, `svclab
// conntrack`, and what `svclab web` draws.
type Views struct {
	net    *topology.Net
	src    Source
	stdout io.Writer
	socklb func() (SocketLB, error)

	mu  sync.Mutex
	nft map[knftables.Family]knft.Interface // svcproxy's tables, by family (nftCounters)
}

// New returns the Views of cfg.
func New(cfg Config) *Views {
	return &Views{net: cfg.Net, src: cfg.Source, stdout: cfg.Stdout, socklb: cfg.SocketLB, nft: map[knftables.Family]knft.Interface{}}
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
func (v *Views) nodeAddrs(ctx context.Context) ([]netip.Addr, error) {
	out, err := v.net.NodeOutput(ctx, "ip", "-j", "-4", "addr")
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
