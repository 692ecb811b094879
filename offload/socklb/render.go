package socklb

import (
	"net/netip"
	"slices"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// element is one element of the hooks' maps: a frontend (VIP, port, protocol)
// and what a connect() to it does.
type element struct {
	svc   ksocklb.Service
	entry ksocklb.Entry
}

// portEntries is what one service port puts in the maps: an element per
// frontend a socket on this node may connect to. It is immutable once
// rendered.
type portEntries struct {
	port     *service.Port // what it was rendered from
	zone     string        // and this node's zone then: topology hints depend on it
	name     service.PortName
	elements []element
	status   PortStatus
}

// PortStatus is what /status shows of one service port on the socket path.
type PortStatus struct {
	Port     string `json:"port"` // "default/web:http"
	Protocol string `json:"protocol"`
	// Path is where a connect() from the cgroup to the port goes: "socklb".
	Path string `json:"path"`
	// Frontends are the addresses a connect() is rewritten from: the
	// ClusterIPs, "198.18.0.10:80".
	Frontends []string `json:"frontends"`
	// Backends are the endpoints a connect() is rewritten to, in slot order;
	// none: the connect() is left alone and the nftables path beside rejects
	// (or, for a Local policy, drops) it.
	Backends []string `json:"backends"`
	// Affinity is the ClientIP affinity timeout ("" without affinity).
	Affinity string `json:"affinity,omitempty"`
}

// protocols are the Service protocols the hooks balance; an SCTP port is
// left to the nftables path (a cgroup sock_addr hook sees SCTP's connect()
// too, but svcproxy's programs match TCP and UDP only).
var protocols = map[service.Protocol]ksocklb.Protocol{service.TCP: ksocklb.TCP, service.UDP: ksocklb.UDP}

// renderPort renders one service port: an element for each ClusterIP of the
// family. It returns nil for a port with none (headless, ExternalName, of the
// other family) or of a protocol the hooks do not balance.
//
// The endpoints are those this node sends its own traffic to, chosen as on
// every other path (service.Port.Categorize, kube-proxy's
// CategorizeEndpoints): the internal traffic policy's endpoints (Local: this
// node's only), topology hints applied, ready ones first and serving
// terminating ones when no endpoint is ready.
//
// Only ClusterIPs: externalIPs, LoadBalancer IPs and NodePorts stay with the
// nftables path beside, where their firewall (source ranges) and their
// external traffic policy are; a rewrite at connect() would go around both.
func renderPort(cfg *Config, p *service.Port, node *service.Node) *portEntries {
	proto, ok := protocols[p.Protocol]
	clusterIPs := cfg.Family.Addrs(p.Service.ClusterIPs)
	if !ok || len(clusterIPs) == 0 {
		return nil
	}
	svc := p.Service
	eps := cfg.Family.Port(p).Categorize(cfg.NodeName, node)
	internal := eps.Cluster
	if svc.InternalPolicyLocal {
		internal = eps.Local
	}
	var affinity time.Duration
	if svc.Affinity.ClientIP {
		affinity = svc.Affinity.Timeout
		if affinity <= 0 {
			affinity = service.DefaultAffinityTimeout
		}
	}
	bes := backends(internal)
	pe := &portEntries{port: p, zone: node.Zone(), name: p.Name,
		status: PortStatus{Port: p.Name.String(), Path: dataplane.ModeSocketLB, Protocol: string(p.Protocol), Backends: addrStrings(bes)}}
	if affinity > 0 {
		pe.status.Affinity = affinity.String()
	}
	for _, ip := range clusterIPs {
		pe.elements = append(pe.elements, element{
			svc:   ksocklb.Service{VIP: ip, Port: p.Port, Protocol: proto},
			entry: ksocklb.Entry{Backends: bes, AffinityTimeout: affinity},
		})
		pe.status.Frontends = append(pe.status.Frontends, netip.AddrPortFrom(ip, p.Port).String())
	}
	return pe
}

// backends are the endpoints' addresses in the Port's order (by address):
// the slot order, stable from one Snapshot to the next, so an unchanged
// port compares equal and a changed one moves as few slots as it can.
func backends(eps []service.Endpoint) []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(eps))
	for _, e := range eps {
		out = append(out, netip.AddrPortFrom(e.Addr.Addr().Unmap(), e.Addr.Port()))
	}
	return out
}

func addrStrings(as []netip.AddrPort) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

// sameEntry reports whether two entries make the hooks do the same.
func sameEntry(a, b ksocklb.Entry) bool {
	return a.AffinityTimeout == b.AffinityTimeout && slices.Equal(a.Backends, b.Backends)
}

// Name, RenderedFrom and Flows implement kernelsync.Port, so RenderPorts can
// reuse unchanged renderings. A rewrite at connect() leaves no conntrack NAT
// entry behind, so there are no flows to clean up: Flows is empty.
func (pe *portEntries) Name() service.PortName                { return pe.name }
func (pe *portEntries) RenderedFrom() (*service.Port, string) { return pe.port, pe.zone }
func (pe *portEntries) Flows() *kernelsync.Flows              { return &kernelsync.Flows{} }
