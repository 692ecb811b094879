package service

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// svc returns a ClusterIP Service default/NAME at 198.18.0.10 with one port
// "http" 80 -> targetPort "http"; edit modifies it.
func svc(name string, edit ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.ServiceSpec{
			Type:      v1.ServiceTypeClusterIP,
			ClusterIP: "198.18.0.10",
			Ports: []v1.ServicePort{{
				Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromString("http"),
			}},
		},
	}
	for _, e := range edit {
		e(s)
	}
	return s
}

// slice returns an IPv4 EndpointSlice for default/SVC with the given ports
// ("name=number") and endpoints.
func slice(name, svc string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func port(name string, number int32, proto v1.Protocol) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(number), Protocol: ptr.To(proto)}
}

func ep(ip string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
}

func TestBuildServiceFields(t *testing.T) {
	local := v1.ServiceInternalTrafficPolicyLocal
	obj := svc("web", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIPs = []string{"198.18.0.10", "fd00::10"}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)})
		s.Spec.ExternalIPs = []string{"198.19.100.1"}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.19.200.1"}, {Hostname: "lb.example"}}
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = &local
		s.Spec.PublishNotReadyAddresses = true
		s.Annotations = map[string]string{"svcproxy.io/ipvs-scheduler": "sh"}
	})
	snap := Build([]*v1.Service{obj}, nil, nil)
	if errs := snap.Errors(); len(errs) > 0 {
		t.Fatalf("unexpected errors: %v", errs)
	}
	s, ok := snap.Service(NamespacedName{"default", "web"})
	if !ok {
		t.Fatal("default/web missing")
	}
	want := []netip.Addr{netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("fd00::10")}
	if len(s.ClusterIPs) != 2 || s.ClusterIPs[0] != want[0] || s.ClusterIPs[1] != want[1] {
		t.Errorf("ClusterIPs = %v, want %v", s.ClusterIPs, want)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Type", s.Type, TypeLoadBalancer},
		{"Headless", s.Headless, false},
		{"ExternalIPs", s.ExternalIPs[0].String(), "198.19.100.1"},
		{"LoadBalancerIPs", len(s.LoadBalancerIPs), 1},
		{"Affinity", s.Affinity, Affinity{ClientIP: true, Timeout: time.Minute}},
		{"ExternalPolicyLocal", s.ExternalPolicyLocal, true},
		{"InternalPolicyLocal", s.InternalPolicyLocal, true},
		{"PublishNotReadyAddresses", s.PublishNotReadyAddresses, true},
		{"annotation", s.Annotations["svcproxy.io/ipvs-scheduler"], "sh"},
		{"ports", len(s.Ports), 2},
		{"port 0 name", s.Ports[0].Name.String(), "default/web:http"},
		{"port 0 nodePort", s.Ports[0].NodePort, uint16(30080)},
		{"port 0 targetPort", s.Ports[0].TargetPort, "http"},
		{"port 1 name", s.Ports[1].Name.String(), "default/web:dns/UDP"},
		{"port 1 protocol", s.Ports[1].Protocol, UDP},
		{"port 1 targetPort", s.Ports[1].TargetPort, "5353"},
		{"port 1 service", s.Ports[1].Service, s},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	for _, vip := range []VIP{
		{TCP, netip.MustParseAddrPort("198.18.0.10:80")},
		{UDP, netip.MustParseAddrPort("198.18.0.10:53")},
		{TCP, netip.MustParseAddrPort("[fd00::10]:80")},
	} {
		if _, ok := snap.PortByVIP(vip); !ok {
			t.Errorf("PortByVIP(%v) not found", vip)
		}
	}
	if _, ok := snap.PortByVIP(VIP{UDP, netip.MustParseAddrPort("198.18.0.10:80")}); ok {
		t.Error("PortByVIP found a UDP port where only TCP exists")
	}
}

func TestBuildDefaults(t *testing.T) {
	obj := svc("web", func(s *v1.Service) {
		s.Spec.Type = ""
		s.Spec.Ports[0].Protocol = ""
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	})
	snap := Build([]*v1.Service{obj}, nil, nil)
	s, _ := snap.Service(NamespacedName{"default", "web"})
	if s == nil {
		t.Fatalf("skipped: %v", snap.Errors())
	}
	if s.Type != TypeClusterIP || s.Ports[0].Protocol != TCP || s.Affinity.Timeout != DefaultAffinityTimeout {
		t.Errorf("defaults: type %q protocol %q affinity %v", s.Type, s.Ports[0].Protocol, s.Affinity)
	}
}

// TestBuildExternalNameTrailingDot: the API server trims one trailing dot
// before it validates spec.externalName, so an absolute name is a valid
// Service (it was skipped, and its DNS name was NXDOMAIN).
func TestBuildExternalNameTrailingDot(t *testing.T) {
	obj := svc("ext", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeExternalName
		s.Spec.ExternalName = "svc1.testns.svc.cluster.local."
	})
	snap := Build([]*v1.Service{obj}, nil, nil)
	ext, ok := snap.Service(NamespacedName{"default", "ext"})
	if !ok {
		t.Fatalf("skipped: %v", snap.Errors())
	}
	if ext.ExternalName != "svc1.testns.svc.cluster.local." {
		t.Errorf("ExternalName = %q", ext.ExternalName)
	}
}

// TestBuildTypeChangedFromExternalName: a Service changed from ExternalName to
// ClusterIP keeps spec.externalName in the API; it is no alias any more, and
// its name must resolve to the ClusterIP (Kubernetes' DNS conformance test
// "should provide DNS for ExternalName services" does exactly this).
func TestBuildTypeChangedFromExternalName(t *testing.T) {
	obj := svc("was-ext", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ExternalName = "bar.example.com"
	})
	snap := Build([]*v1.Service{obj}, nil, nil)
	got, ok := snap.Service(NamespacedName{"default", "was-ext"})
	if !ok {
		t.Fatalf("skipped: %v", snap.Errors())
	}
	if got.ExternalName != "" || len(got.ClusterIPs) != 1 {
		t.Errorf("ExternalName = %q, ClusterIPs = %v; want no alias and the ClusterIP", got.ExternalName, got.ClusterIPs)
	}
}

func TestBuildHeadlessAndExternalName(t *testing.T) {
	headless := svc("db", func(s *v1.Service) { s.Spec.ClusterIP = "None"; s.Spec.Ports = nil })
	ext := svc("mail", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeExternalName
		s.Spec.ClusterIP = ""
		s.Spec.ExternalName = "mail.example.org"
	})
	db1 := ep("198.19.1.1", true)
	db1.Hostname = ptr.To("db-0")
	snap := Build([]*v1.Service{headless, ext}, []*discoveryv1.EndpointSlice{
		slice("db-abc", "db", nil, db1, ep("198.19.1.2", false)),
	}, nil)
	if errs := snap.Errors(); len(errs) > 0 {
		t.Fatalf("unexpected errors: %v", errs)
	}
	db, _ := snap.Service(NamespacedName{"default", "db"})
	if !db.Headless || len(db.ClusterIPs) != 0 {
		t.Errorf("headless: Headless=%v ClusterIPs=%v", db.Headless, db.ClusterIPs)
	}
	if len(db.Endpoints) != 2 || db.Endpoints[0].Hostname != "db-0" || db.Endpoints[1].Ready {
		t.Errorf("headless endpoints = %+v", db.Endpoints)
	}
	mail, _ := snap.Service(NamespacedName{"default", "mail"})
	if mail.ExternalName != "mail.example.org" || len(mail.ClusterIPs) != 0 {
		t.Errorf("externalName: %+v", mail)
	}
}

// Two slices of one Service whose pods name "http" differently: each slice's
// endpoints get that slice's number, as kube-proxy matches ports by name.
func TestBuildSlicesNamedTargetPorts(t *testing.T) {
	term := discoveryv1.Endpoint{
		Addresses:  []string{"198.19.1.3"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)},
		NodeName:   ptr.To("node-b"), Zone: ptr.To("zone-2"),
	}
	snap := Build([]*v1.Service{svc("web")}, []*discoveryv1.EndpointSlice{
		slice("web-v1", "web", []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}, ep("198.19.1.1", true)),
		slice("web-v2", "web", []discoveryv1.EndpointPort{port("http", 9090, v1.ProtocolTCP), port("metrics", 9100, v1.ProtocolTCP)},
			ep("198.19.1.2", true), term),
		slice("other", "other", []discoveryv1.EndpointPort{port("http", 1, v1.ProtocolTCP)}, ep("198.19.9.9", true)),
	}, nil)
	p, _ := snap.Port(PortName{NamespacedName{"default", "web"}, "http", TCP})
	var got []string
	for _, e := range p.Endpoints {
		got = append(got, e.String())
	}
	if want := "198.19.1.1:8080 198.19.1.2:9090 198.19.1.3:9090"; strings.Join(got, " ") != want {
		t.Errorf("endpoints = %v, want %s", got, want)
	}
	if e := p.Endpoints[2]; e.Ready || !e.Serving || !e.Terminating || e.NodeName != "node-b" || e.Zone != "zone-2" {
		t.Errorf("terminating endpoint = %+v", e)
	}
	if n := len(p.Ready()); n != 2 {
		t.Errorf("Ready() has %d endpoints, want 2", n)
	}
	if n := len(p.Categorize("", nil).Cluster); n != 2 {
		t.Errorf("Categorize().Cluster has %d endpoints, want the 2 ready ones", n)
	}
}

func TestCategorizeFallsBackToTerminating(t *testing.T) {
	p := &Port{Service: &Service{}, Endpoints: []Endpoint{
		{Addr: netip.MustParseAddrPort("198.19.1.1:80"), Serving: true, Terminating: true},
		{Addr: netip.MustParseAddrPort("198.19.1.2:80"), Serving: false, Terminating: true},
		{Addr: netip.MustParseAddrPort("198.19.1.3:80")},
	}}
	if u := p.Categorize("", nil).Cluster; len(u) != 1 || u[0].Addr.String() != "198.19.1.1:80" {
		t.Errorf("Categorize().Cluster = %v, want only the serving terminating endpoint", u)
	}
}

func TestCategorizeLocal(t *testing.T) {
	e := func(addr, node string, ready, serving, terminating bool) Endpoint {
		return Endpoint{Addr: netip.MustParseAddrPort(addr), NodeName: node, Ready: ready, Serving: serving, Terminating: terminating}
	}
	p := &Port{Service: &Service{InternalPolicyLocal: true}, Endpoints: []Endpoint{
		e("198.19.1.1:80", "a", true, true, false),
		e("198.19.1.2:80", "b", true, true, false),
		e("198.19.1.3:80", "b", false, true, true),
	}}
	if u := p.Categorize("a", nil).Local; len(u) != 1 || u[0].Addr.String() != "198.19.1.1:80" {
		t.Errorf("Categorize(a) = %v, want the ready endpoint on a", u)
	}
	if u := p.Categorize("b", nil).Local; len(u) != 1 || u[0].Addr.String() != "198.19.1.2:80" {
		t.Errorf("Categorize(b) = %v, want only the ready endpoint on b", u)
	}
	// No endpoint on b is ready now: its serving terminating one takes the
	// traffic, although node a has a ready one (kube-proxy decides per node).
	p.Endpoints[1].Ready = false
	if u := p.Categorize("b", nil).Local; len(u) != 1 || u[0].Addr.String() != "198.19.1.3:80" {
		t.Errorf("Categorize(b) = %v, want the serving terminating endpoint on b", u)
	}
	if u := p.Categorize("c", nil).Local; len(u) != 0 {
		t.Errorf("Categorize(c) = %v, want none", u)
	}
}

func TestBuildLegacyEndpoints(t *testing.T) {
	legacy := &v1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Subsets: []v1.EndpointSubset{{
			Addresses:         []v1.EndpointAddress{{IP: "198.19.1.1", Hostname: "web-0", NodeName: ptr.To("node-a")}},
			NotReadyAddresses: []v1.EndpointAddress{{IP: "198.19.1.2"}},
			Ports:             []v1.EndpointPort{{Name: "http", Port: 8080}},
		}},
	}
	snap := Build([]*v1.Service{svc("web")}, nil, []*v1.Endpoints{legacy})
	p, _ := snap.Port(PortName{NamespacedName{"default", "web"}, "http", TCP})
	if len(p.Endpoints) != 2 {
		t.Fatalf("endpoints = %v", p.Endpoints)
	}
	if e := p.Endpoints[0]; !e.Ready || e.Hostname != "web-0" || e.NodeName != "node-a" || e.Addr.Port() != 8080 {
		t.Errorf("ready endpoint = %+v", e)
	}
	if e := p.Endpoints[1]; e.Ready || e.Serving {
		t.Errorf("not-ready endpoint = %+v", e)
	}

	// Once a slice exists, v1.Endpoints is ignored.
	snap = Build([]*v1.Service{svc("web")}, []*discoveryv1.EndpointSlice{
		slice("web-x", "web", []discoveryv1.EndpointPort{port("http", 7070, v1.ProtocolTCP)}, ep("198.19.5.5", true)),
	}, []*v1.Endpoints{legacy})
	p, _ = snap.Port(PortName{NamespacedName{"default", "web"}, "http", TCP})
	if len(p.Endpoints) != 1 || p.Endpoints[0].Addr.String() != "198.19.5.5:7070" {
		t.Errorf("with a slice: endpoints = %v", p.Endpoints)
	}
}

func TestBuildRejectsInvalid(t *testing.T) {
	cases := []struct {
		name string
		obj  *v1.Service
		want string
	}{
		{"bad clusterIP", svc("web", func(s *v1.Service) { s.Spec.ClusterIP = "999.1.1.1" }),
			`service default/web: spec.clusterIP "999.1.1.1": not an IP address`},
		{"missing clusterIP", svc("web", func(s *v1.Service) { s.Spec.ClusterIP = "" }),
			`service default/web: spec.clusterIP: not allocated`},
		{"clusterIP outside family", svc("web", func(s *v1.Service) {
			s.Spec.ClusterIPs = []string{"198.18.0.10"}
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
		}), `service default/web: spec.clusterIPs[0] "198.18.0.10": not an IPv6 address`},
		{"clusterIPs disagree", svc("web", func(s *v1.Service) { s.Spec.ClusterIPs = []string{"198.18.0.11"} }),
			`spec.clusterIPs[0] "198.18.0.11": must equal spec.clusterIP "198.18.0.10"`},
		{"two of one family", svc("web", func(s *v1.Service) { s.Spec.ClusterIPs = []string{"198.18.0.10", "198.18.0.11"} }),
			`spec.clusterIPs[1] "198.18.0.11": must be of the other family`},
		{"port 0", svc("web", func(s *v1.Service) { s.Spec.Ports[0].Port = 0 }),
			`service default/web: spec.ports[0].port "0": must be between 1 and 65535`},
		{"port too big", svc("web", func(s *v1.Service) { s.Spec.Ports[0].Port = 65536 }),
			`spec.ports[0].port "65536": must be between 1 and 65535`},
		{"unknown protocol", svc("web", func(s *v1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }),
			`spec.ports[0].protocol "ICMP": must be TCP, UDP or SCTP`},
		{"duplicate port names", svc("web", func(s *v1.Service) { s.Spec.Ports = append(s.Spec.Ports, s.Spec.Ports[0]) }),
			`spec.ports[1].name "http": duplicate port name`},
		{"unnamed among many", svc("web", func(s *v1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Port: 81})
		}), `spec.ports[1].name: required when a Service has more than one port`},
		{"bad nodePort", svc("web", func(s *v1.Service) { s.Spec.Ports[0].NodePort = 70000 }),
			`spec.ports[0].nodePort "70000": must be between 0 and 65535`},
		{"bad targetPort name", svc("web", func(s *v1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("Not_A_Name") }),
			`spec.ports[0].targetPort "Not_A_Name": not a port name`},
		{"bad externalIP", svc("web", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"1.2.3"} }),
			`spec.externalIPs[0] "1.2.3": not an IP address`},
		{"bad LB ingress", svc("web", func(s *v1.Service) {
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "x"}}
		}), `status.loadBalancer.ingress[0].ip "x": not an IP address`},
		{"bad affinity", svc("web", func(s *v1.Service) { s.Spec.SessionAffinity = "Cookie" }),
			`spec.sessionAffinity "Cookie": must be None or ClientIP`},
		{"affinity timeout", svc("web", func(s *v1.Service) {
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](0)}}
		}), `spec.sessionAffinityConfig.clientIP.timeoutSeconds "0": must be between 1 and 86400`},
		{"unknown type", svc("web", func(s *v1.Service) { s.Spec.Type = "Ingress" }),
			`spec.type "Ingress": unknown type`},
		{"bad externalName", svc("web", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeExternalName
			s.Spec.ExternalName = "not a name"
		}), `spec.externalName "not a name": not a DNS name`},
		{"externalName only a dot", svc("web", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeExternalName
			s.Spec.ExternalName = "."
		}), `spec.externalName ".": not a DNS name`},
		{"externalName two trailing dots", svc("web", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeExternalName
			s.Spec.ExternalName = "db.example.org.."
		}), `spec.externalName "db.example.org..": not a DNS name`},
		{"health check port without policy Local", svc("web", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.HealthCheckNodePort = 32081
		}), `spec.healthCheckNodePort "32081": may only be set when type is LoadBalancer and externalTrafficPolicy is Local`},
		{"bad traffic policy", svc("web", func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = "Nearby" }),
			`spec.externalTrafficPolicy "Nearby": must be Cluster or Local`},
		{"bad source range", svc("web", func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/33"} }),
			`spec.loadBalancerSourceRanges[0] "203.0.113.0/33": not a CIDR`},
		{"bad source range annotation", svc("web", func(s *v1.Service) {
			s.Annotations = map[string]string{annotationSourceRanges: "203.0.113.0/25, nope"}
		}), `metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges] "nope": not a CIDR`},
		{"bad ipMode", svc("web", func(s *v1.Service) {
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.19.200.1", IPMode: ptr.To[v1.LoadBalancerIPMode]("Tunnel")}}
		}), `status.loadBalancer.ingress[0].ipMode "Tunnel": must be VIP or Proxy`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The bad Service is skipped; a good one next to it still works.
			snap := Build([]*v1.Service{c.obj, svc("ok", func(s *v1.Service) { s.Spec.ClusterIP = "198.18.0.20" })}, nil, nil)
			if _, ok := snap.Service(NamespacedName{"default", "web"}); ok {
				t.Error("invalid Service was kept")
			}
			if _, ok := snap.Service(NamespacedName{"default", "ok"}); !ok {
				t.Error("valid Service next to it was lost")
			}
			if errs := snap.Errors(); len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
				t.Errorf("errors = %v, want one containing %q", errs, c.want)
			}
		})
	}
}

func TestBuildRejectsInvalidEndpoints(t *testing.T) {
	bad6 := slice("web-6", "web", nil, ep("198.19.1.9", true))
	bad6.AddressType = discoveryv1.AddressTypeIPv6
	cases := []struct {
		name  string
		slice *discoveryv1.EndpointSlice
		eps   *v1.Endpoints
		want  string
	}{
		{name: "bad slice address", slice: slice("web-bad", "web", nil, ep("198.19.1.300", true)),
			want: `endpointslice default/web-bad: endpoints[0].addresses[0] "198.19.1.300": not an IP address`},
		{name: "address of the wrong family", slice: bad6,
			want: `endpointslice default/web-6: endpoints[0].addresses[0] "198.19.1.9": not an IPv6 address`},
		{name: "slice port 0", slice: slice("web-p", "web", []discoveryv1.EndpointPort{port("http", 0, v1.ProtocolTCP)}),
			want: `endpointslice default/web-p: ports[0].port "0": must be between 1 and 65535`},
		{name: "bad endpoints IP", eps: &v1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Subsets:    []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{{IP: "nope"}}}},
		}, want: `endpoints default/web: subsets[0].addresses[0].ip "nope": not an IP address`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ss []*discoveryv1.EndpointSlice
			var es []*v1.Endpoints
			if c.slice != nil {
				ss = append(ss, c.slice)
			}
			if c.eps != nil {
				es = append(es, c.eps)
			}
			snap := Build([]*v1.Service{svc("web")}, ss, es)
			if _, ok := snap.Service(NamespacedName{"default", "web"}); !ok {
				t.Error("the Service itself was lost")
			}
			if errs := snap.Errors(); len(errs) != 1 || errs[0].Error() != c.want {
				t.Errorf("errors = %v, want %q", errs, c.want)
			}
		})
	}
}

func TestSnapshotOrder(t *testing.T) {
	snap := Build([]*v1.Service{
		svc("b", func(s *v1.Service) { s.Spec.ClusterIP = "198.18.0.2" }),
		svc("a", func(s *v1.Service) { s.Spec.ClusterIP = "198.18.0.1" }),
	}, nil, nil)
	if snap.Len() != 2 || snap.Services()[0].Name != "a" || snap.Ports()[1].Name.Name != "b" {
		t.Errorf("not sorted: %v", snap.Ports())
	}
}

// The LoadBalancer fields a kernel path needs: source ranges (field, or the older
// annotation), the health check port of policy Local, and ingress IPs without the
// ipMode: Proxy ones.
func TestBuildLoadBalancer(t *testing.T) {
	lb := func(edit func(*v1.Service)) *Service {
		t.Helper()
		obj := svc("web", func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{
				{IP: "198.19.200.1"},
				{IP: "198.19.200.2", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)},
				{IP: "198.19.200.3", IPMode: ptr.To(v1.LoadBalancerIPModeVIP)},
			}
			edit(s)
		})
		snap := Build([]*v1.Service{obj}, nil, nil)
		if errs := snap.Errors(); len(errs) > 0 {
			t.Fatal(errs)
		}
		s, _ := snap.Service(NamespacedName{"default", "web"})
		return s
	}
	s := lb(func(s *v1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/25", " 198.19.10.7/32"}
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 32000
		s.Annotations = map[string]string{annotationSourceRanges: "10.0.0.0/8"} // the field wins
	})
	wantIPs := []netip.Addr{netip.MustParseAddr("198.19.200.1"), netip.MustParseAddr("198.19.200.3")}
	if !slices.Equal(s.LoadBalancerIPs, wantIPs) {
		t.Errorf("LoadBalancerIPs %v, want %v (ipMode Proxy left out)", s.LoadBalancerIPs, wantIPs)
	}
	wantRanges := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/25"), netip.MustParsePrefix("198.19.10.7/32")}
	if !slices.Equal(s.LoadBalancerSourceRanges, wantRanges) {
		t.Errorf("LoadBalancerSourceRanges %v, want %v", s.LoadBalancerSourceRanges, wantRanges)
	}
	if s.HealthCheckNodePort != 32000 {
		t.Errorf("HealthCheckNodePort %d, want 32000", s.HealthCheckNodePort)
	}
	s = lb(func(s *v1.Service) {
		s.Annotations = map[string]string{annotationSourceRanges: "203.0.113.7/24,198.19.10.0/24"}
	})
	wantRanges = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.19.10.0/24")}
	if !slices.Equal(s.LoadBalancerSourceRanges, wantRanges) || s.HealthCheckNodePort != 0 {
		t.Errorf("from the annotation: ranges %v (want %v), health check port %d (want 0)",
			s.LoadBalancerSourceRanges, wantRanges, s.HealthCheckNodePort)
	}
}

// Leading zeros in IPv4 addresses are decimal, as kube-proxy reads them.
func TestBuildLeadingZeros(t *testing.T) {
	obj := svc("web", func(s *v1.Service) {
		s.Spec.ClusterIP = "198.018.000.010"
		s.Spec.ExternalIPs = []string{"198.19.100.010"}
	})
	snap := Build([]*v1.Service{obj}, []*discoveryv1.EndpointSlice{
		slice("web-1", "web", []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}, ep("198.19.1.010", true)),
	}, nil)
	if errs := snap.Errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
	s, _ := snap.Service(NamespacedName{"default", "web"})
	if got := s.ClusterIPs[0].String(); got != "198.18.0.10" {
		t.Errorf("clusterIP 198.018.000.010 read as %s, want 198.18.0.10 (decimal, not octal)", got)
	}
	if got := s.ExternalIPs[0].String(); got != "198.19.100.10" {
		t.Errorf("externalIP read as %s", got)
	}
	if got := s.Ports[0].Endpoints[0].Addr.String(); got != "198.19.1.10:8080" {
		t.Errorf("endpoint read as %s", got)
	}
	for _, bad := range []string{"198.18.0.0010.1", "::ffff:198.018.0.1", "fe80::1%eth0", "0x0a.0.0.1"} {
		if a, ok := ParseAddr(bad); ok {
			t.Errorf("ParseAddr(%q) = %s, want an error", bad, a)
		}
	}
}
