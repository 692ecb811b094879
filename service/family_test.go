package service

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// dualStack returns default/NAME with a ClusterIP of each family, IPv4 first.
func dualStack(name string, edit ...func(*v1.Service)) *v1.Service {
	return svc(name, append([]func(*v1.Service){func(s *v1.Service) {
		s.Spec.ClusterIPs = []string{"198.18.0.10", "2001:db8:18::10"}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
	}}, edit...)...)
}

// slices4and6 are the two EndpointSlices of default/web, one per addressType,
// port "http" 8080.
func slices4and6() []*discoveryv1.EndpointSlice {
	ports := []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}
	v6 := slice("web-v6", "web", ports, ep("2001:db8:19::2", true), ep("2001:db8:19::3", true))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	return []*discoveryv1.EndpointSlice{slice("web-v4", "web", ports, ep("198.19.1.2", true)), v6}
}

func TestBuildIPFamilies(t *testing.T) {
	cases := []struct {
		name   string
		obj    *v1.Service
		fams   []Family
		policy IPFamilyPolicy
	}{
		{"written before dual-stack", svc("web"), []Family{IPv4}, SingleStack},
		{"two ClusterIPs, no fields", svc("web", func(s *v1.Service) {
			s.Spec.ClusterIP = "2001:db8:18::10"
			s.Spec.ClusterIPs = []string{"2001:db8:18::10", "198.18.0.10"}
		}), []Family{IPv6, IPv4}, RequireDualStack},
		{"dual-stack", dualStack("web"), []Family{IPv4, IPv6}, RequireDualStack},
		{"prefers dual-stack, gets one", svc("web", func(s *v1.Service) {
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol}
			s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
		}), []Family{IPv4}, PreferDualStack},
		{"headless dual-stack", svc("web", func(s *v1.Service) {
			s.Spec.ClusterIP = v1.ClusterIPNone
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
			s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
		}), []Family{IPv6, IPv4}, RequireDualStack},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := Build([]*v1.Service{c.obj}, nil, nil)
			if errs := snap.Errors(); len(errs) > 0 {
				t.Fatal(errs)
			}
			s, _ := snap.Service(NamespacedName{"default", "web"})
			if !slices.Equal(s.IPFamilies, c.fams) || s.IPFamilyPolicy != c.policy {
				t.Errorf("families %v, policy %s; want %v, %s", s.IPFamilies, s.IPFamilyPolicy, c.fams, c.policy)
			}
		})
	}
}

func TestBuildRejectsInvalidFamilies(t *testing.T) {
	cases := []struct {
		name string
		obj  *v1.Service
		want string
	}{
		{"unknown policy", dualStack("web", func(s *v1.Service) { s.Spec.IPFamilyPolicy = ptr.To[v1.IPFamilyPolicy]("BothPlease") }),
			`service default/web: spec.ipFamilyPolicy "BothPlease": must be SingleStack, PreferDualStack or RequireDualStack`},
		{"unknown family", svc("web", func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{"IPv5"} }),
			`spec.ipFamilies[0] "IPv5": must be IPv4 or IPv6`},
		{"family twice", svc("web", func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv4Protocol} }),
			`spec.ipFamilies[1] "IPv4": duplicate family`},
		{"SingleStack with two", dualStack("web", func(s *v1.Service) { s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicySingleStack) }),
			`spec.ipFamilyPolicy "SingleStack": allows one family, not two`},
		{"RequireDualStack with one", svc("web", func(s *v1.Service) {
			s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		}), `spec.clusterIPs "[198.18.0.10]": RequireDualStack needs a ClusterIP of each family`},
		{"families short of the ClusterIPs", dualStack("web", func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol} }),
			`spec.ipFamilies "[IPv4]": must name the family of every ClusterIP`},
		{"families in the wrong order", dualStack("web", func(s *v1.Service) {
			s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
		}), `spec.clusterIPs[0] "198.18.0.10": not an IPv6 address`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := Build([]*v1.Service{c.obj}, nil, nil)
			if errs := snap.Errors(); len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
				t.Errorf("errors = %v, want one containing %q", errs, c.want)
			}
		})
	}
}

// A dual-stack Service's port has the endpoints of both slices; each family's
// view has its ClusterIP, addresses and endpoints only.
func TestSnapshotFamily(t *testing.T) {
	web := dualStack("web", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalIPs = []string{"198.19.100.1", "2001:db8:19::100"}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "2001:db8:19::200"}}
		s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
	})
	only6 := svc("only6", func(s *v1.Service) { s.Spec.ClusterIP = "2001:db8:18::20" })
	only4 := svc("only4", func(s *v1.Service) { s.Spec.ClusterIP = "198.18.0.30" })
	headless := svc("headless", func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone })
	snap := Build([]*v1.Service{web, only6, only4, headless}, slices4and6(), nil)
	if errs := snap.Errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
	webName := PortName{NamespacedName{"default", "web"}, "http", TCP}
	p, _ := snap.Port(webName)
	if len(p.Endpoints) != 3 {
		t.Fatalf("the full Snapshot: %v, want the endpoints of both slices", p.Endpoints)
	}

	cases := []struct {
		fam                      Family
		services                 []string
		clusterIP, externalIPs   string
		lbIPs, ranges, endpoints string
		nodePort                 uint16
		vip                      string
		sharedName               string // a single-family Service the view shares
	}{
		{IPv4, []string{"default/only4", "default/web"}, "[198.18.0.10]", "[198.19.100.1]", "[]", "[203.0.113.0/24]",
			"[198.19.1.2:8080]", 30080, "198.18.0.10:80", "only4"},
		{IPv6, []string{"default/only6", "default/web"}, "[2001:db8:18::10]", "[2001:db8:19::100]", "[2001:db8:19::200]", "[]",
			"[[2001:db8:19::2]:8080 [2001:db8:19::3]:8080]", 30080, "[2001:db8:18::10]:80", "only6"},
	}
	for _, c := range cases {
		t.Run(string(c.fam), func(t *testing.T) {
			v := snap.Family(c.fam)
			if v != snap.Family(c.fam) {
				t.Error("a second call made a second view")
			}
			var names []string
			for _, s := range v.Services() {
				names = append(names, s.NamespacedName.String())
			}
			if !slices.Equal(names, c.services) {
				t.Errorf("services %v, want %v (no headless, none of the other family only)", names, c.services)
			}
			s, _ := v.Service(NamespacedName{"default", "web"})
			got := []string{fmtList(s.ClusterIPs), fmtList(s.ExternalIPs), fmtList(s.LoadBalancerIPs), fmtList(s.LoadBalancerSourceRanges)}
			want := []string{c.clusterIP, c.externalIPs, c.lbIPs, c.ranges}
			if !slices.Equal(got, want) {
				t.Errorf("ClusterIPs, externalIPs, LB IPs, source ranges = %v, want %v", got, want)
			}
			vp, _ := v.Port(webName)
			if fmtList(vp.Endpoints) != c.endpoints || vp.NodePort != c.nodePort || vp.Service != s {
				t.Errorf("port: endpoints %v, NodePort %d; want %s, %d, and its Service the view's", vp.Endpoints, vp.NodePort, c.endpoints, c.nodePort)
			}
			for _, e := range s.Endpoints {
				if !c.fam.Has(e.Addr.Addr()) {
					t.Errorf("the Service's endpoints %v: want %s only", s.Endpoints, c.fam)
				}
			}
			if _, ok := v.PortByVIP(VIP{Protocol: TCP, Addr: netip.MustParseAddrPort(c.vip)}); !ok {
				t.Errorf("PortByVIP(%s): not found", c.vip)
			}
			orig, _ := snap.Service(NamespacedName{"default", c.sharedName})
			if shared, _ := v.Service(NamespacedName{"default", c.sharedName}); shared != orig {
				t.Errorf("%s has addresses of %s only: want it shared, not copied", c.sharedName, c.fam)
			}
		})
	}
	// The full Snapshot is unchanged.
	if s, _ := snap.Service(NamespacedName{"default", "web"}); len(s.ClusterIPs) != 2 || len(s.Ports[0].Endpoints) != 3 {
		t.Errorf("the view changed the Snapshot: %v %v", s.ClusterIPs, s.Ports[0].Endpoints)
	}
}

func fmtList[T interface{ String() string }](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

// Family.Port keeps a port of one family as it is, and gives a port of both
// a copy with its family's endpoints: Categorize then answers for the family
// alone (an IPv6 dataplane of a port with only IPv4 endpoints has none).
func TestFamilyPort(t *testing.T) {
	v4 := Endpoint{Addr: netip.MustParseAddrPort("198.19.1.10:8080"), Ready: true, Serving: true}
	v6 := Endpoint{Addr: netip.MustParseAddrPort("[2001:db8:19::10]:8080"), Ready: true, Serving: true}
	only4 := &Port{Service: &Service{}, Endpoints: []Endpoint{v4}}
	if IPv4.Port(only4) != only4 {
		t.Error("IPv4.Port of an IPv4-only port: a copy, want the port itself")
	}
	if got := IPv6.Port(only4).Categorize("", nil); got.HasAny || len(got.Cluster) != 0 {
		t.Errorf("IPv6.Port of an IPv4-only port categorizes to %+v, want no endpoint", got)
	}
	both := &Port{Service: &Service{}, Endpoints: []Endpoint{v4, v6}}
	if got := IPv6.Port(both).Endpoints; len(got) != 1 || got[0].Addr != v6.Addr || len(both.Endpoints) != 2 {
		t.Errorf("IPv6.Port endpoints %v (port keeps %v), want [%s] and the port unchanged", got, both.Endpoints, v6)
	}
}
