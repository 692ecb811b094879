package service

import (
	"fmt"
	"net/netip"
	"time"
)

// Protocol is a transport protocol of a service port, as in v1.Protocol.
type Protocol string

// The protocols a Service may declare.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// Type is a Service's spec.type.
type Type string

// The Service types of the Kubernetes API.
const (
	TypeClusterIP    Type = "ClusterIP"
	TypeNodePort     Type = "NodePort"
	TypeLoadBalancer Type = "LoadBalancer"
	TypeExternalName Type = "ExternalName"
)

// NamespacedName names a Service: "default/web".
type NamespacedName struct {
	Namespace string
	Name      string
}

func (n NamespacedName) String() string { return n.Namespace + "/" + n.Name }

// PortName is the key of a service port: the Service, the port's name (empty for
// a Service's only, unnamed port) and its protocol. Its String form is kube-proxy's
// ServicePortName form, "default/web:http", with the protocol appended when it is
// not TCP: "default/dns:dns/UDP".
type PortName struct {
	NamespacedName
	Port     string
	Protocol Protocol
}

func (p PortName) String() string {
	s := p.NamespacedName.String() + ":" + p.Port
	if p.Protocol != TCP {
		s += "/" + string(p.Protocol)
	}
	return s
}

// DefaultAffinityTimeout is the ClientIP affinity timeout a Service gets when it
// does not set sessionAffinityConfig.clientIP.timeoutSeconds:
// v1.DefaultClientIPServiceAffinitySeconds, 3 hours.
const DefaultAffinityTimeout = 10800 * time.Second

// Affinity is a Service's session affinity. The zero value is "None".
type Affinity struct {
	// ClientIP sends every connection of one client address to the same endpoint.
	ClientIP bool
	// Timeout is how long an idle client keeps its endpoint (ClientIP only).
	Timeout time.Duration
}

// Service is one Service object after validation. Headless and ExternalName
// Services are kept (the DNS answers for them) but have no ClusterIPs.
type Service struct {
	NamespacedName
	Type Type

	// ClusterIPs are the virtual addresses, primary family first. Empty for
	// headless (clusterIP: None) and ExternalName Services.
	ClusterIPs []netip.Addr
	// Headless is true for clusterIP: None.
	Headless bool
	// IPFamilies are spec.ipFamilies, primary first; for an object written
	// without them (before dual-stack, or by hand), the families of its
	// ClusterIPs. The API server fills them for headless Services too.
	IPFamilies []Family
	// IPFamilyPolicy is spec.ipFamilyPolicy; without one, SingleStack, or
	// RequireDualStack for a Service with a ClusterIP of each family (the API
	// server's defaults).
	IPFamilyPolicy IPFamilyPolicy
	// ExternalName is the DNS name of an ExternalName Service.
	ExternalName string

	ExternalIPs []netip.Addr
	// LoadBalancerIPs are status.loadBalancer.ingress[].ip, without those whose
	// ipMode is Proxy: the load balancer proxies that traffic itself and sends it
	// to a node address, so the node must not capture the address (kube-proxy's
	// LoadBalancerIPMode, KEP-1860).
	LoadBalancerIPs []netip.Addr
	// LoadBalancerSourceRanges is spec.loadBalancerSourceRanges: when set, traffic
	// to a LoadBalancer IP from any other source is dropped.
	LoadBalancerSourceRanges []netip.Prefix
	// HealthCheckNodePort is spec.healthCheckNodePort (externalTrafficPolicy:
	// Local): the node answers the load balancer's health check there. 0: none.
	HealthCheckNodePort uint16

	Affinity Affinity

	// ExternalPolicyLocal is externalTrafficPolicy: Local: traffic from outside
	// the cluster (NodePort, externalIPs, LoadBalancer) goes only to endpoints on
	// this node, and keeps its client address.
	ExternalPolicyLocal bool
	// InternalPolicyLocal is internalTrafficPolicy: Local: traffic from inside the
	// cluster to the ClusterIP goes only to endpoints on the same node.
	InternalPolicyLocal bool

	// PublishNotReadyAddresses makes the DNS publish endpoints that are not ready.
	PublishNotReadyAddresses bool

	// TrafficDistribution is spec.trafficDistribution as written: PreferSameNode,
	// PreferSameZone, PreferClose (its older name) or "". The proxy does not
	// choose by it: the EndpointSlice controller turns it into the endpoints'
	// hints, and Port.Categorize follows the hints, as kube-proxy does. It is
	// kept to say what the Service asked for beside what the hints give.
	TrafficDistribution string

	// Annotations are the Service's metadata.annotations (e.g. a per-service IPVS
	// scheduler override). Read only.
	Annotations map[string]string

	// Ports in the order of spec.ports.
	Ports []*Port

	// Triggers are the last-change-trigger-times of the Service's
	// EndpointSlices that carry one, one per slice: where kube-proxy's
	// kubeproxy_network_programming_duration_seconds starts. Read only.
	Triggers []Trigger

	// Endpoints are every endpoint address of the Service whatever its ports,
	// one per IP (Addr's port is 0), sorted: a headless Service may have no
	// ports at all and still needs its A records.
	Endpoints []Endpoint
}

// Port is one service port and the endpoints behind it.
type Port struct {
	Name PortName
	// Service is the Service this port belongs to.
	Service *Service

	Port     uint16
	Protocol Protocol
	NodePort uint16 // 0: none
	// TargetPort is spec.ports[].targetPort as written: a number or a name.
	TargetPort string

	// Endpoints in a stable order (by IP, then port). Endpoints of every
	// condition are here; Categorize chooses those a proxy sends to.
	Endpoints []Endpoint
}

// Endpoint is one backend address of a service port, from an EndpointSlice (or a
// v1.Endpoints object when the Service has no slices).
type Endpoint struct {
	Addr netip.AddrPort

	// Conditions, as in discovery/v1 EndpointConditions (nil is read as Ready=true,
	// Serving=Ready, Terminating=false).
	Ready       bool
	Serving     bool
	Terminating bool

	NodeName string
	Zone     string
	Hostname string

	// ForZones and ForNodes are the endpoint's hints (discovery/v1
	// endpoints[].hints.forZones[].name and .forNodes[].name): the zones and
	// nodes whose proxies should prefer it. nil when the slice gives none.
	// They are shared and never modified.
	ForZones, ForNodes []string
}

func (e Endpoint) String() string { return e.Addr.String() }

// Ready returns the endpoints that take new traffic.
func (p *Port) Ready() []Endpoint {
	var out []Endpoint
	for _, e := range p.Endpoints {
		if e.Ready {
			out = append(out, e)
		}
	}
	return out
}

func (p *Port) String() string { return p.Name.String() }

// VIP is the key of a virtual address lookup: protocol and ClusterIP:port.
type VIP struct {
	Protocol Protocol
	Addr     netip.AddrPort
}

func (v VIP) String() string { return fmt.Sprintf("%s/%s", v.Addr, v.Protocol) }
