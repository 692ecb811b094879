package service

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// InvalidError says which object was skipped and why, naming the field:
//
//	service default/web: spec.clusterIP "999.1.1.1": not an IP address
type InvalidError struct {
	Kind   string // "service", "endpointslice", "endpoints"
	Object NamespacedName
	Field  string // JSON path, e.g. spec.ports[1].port
	Value  string // the offending value as written; "" when it is missing
	Reason string
}

func (e *InvalidError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s %s: %s: %s", e.Kind, e.Object, e.Field, e.Reason)
	}
	return fmt.Sprintf("%s %s: %s %q: %s", e.Kind, e.Object, e.Field, e.Value, e.Reason)
}

// fieldErrors collects the first problem of one object.
type fieldErrors struct {
	kind string
	obj  NamespacedName
	err  *InvalidError
}

func (f *fieldErrors) add(field, value, reason string) {
	if f.err == nil {
		f.err = &InvalidError{Kind: f.kind, Object: f.obj, Field: field, Value: value, Reason: reason}
	}
}

func (f *fieldErrors) result() error {
	if f.err == nil {
		return nil
	}
	return f.err
}

// checkIP parses s as an IP address of the given family ("" for any).
func (f *fieldErrors) checkIP(field, s string, family v1.IPFamily) {
	ip, ok := ParseAddr(s)
	if !ok {
		f.add(field, s, "not an IP address")
		return
	}
	if family != "" && familyOf(ip) != family {
		f.add(field, s, fmt.Sprintf("not an %s address", family))
	}
}

// checkEndpointIP is checkIP for an endpoint address, which must also not be
// one the API server refuses (specialIP).
func (f *fieldErrors) checkEndpointIP(field, s string, family v1.IPFamily) {
	f.checkIP(field, s, family)
	if ip, err := netip.ParseAddr(s); err == nil && f.err == nil {
		if why := specialIP(ip.Unmap()); why != "" {
			f.add(field, s, why)
		}
	}
}

func familyOf(ip netip.Addr) v1.IPFamily {
	if ip.Unmap().Is4() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

func validateService(obj *v1.Service) error {
	f := &fieldErrors{kind: "service", obj: NamespacedName{Namespace: obj.Namespace, Name: obj.Name}}
	if obj.Name == "" {
		f.add("metadata.name", "", "required")
	}
	spec := &obj.Spec
	switch spec.Type {
	case "", v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer:
		validateClusterIPs(f, spec)
	case v1.ServiceTypeExternalName:
		// The API server trims one trailing dot before it validates: an
		// absolute name ("db.example.org.") is accepted.
		name := strings.TrimSuffix(spec.ExternalName, ".")
		if errs := validation.IsDNS1123Subdomain(name); name == "" || len(errs) > 0 {
			f.add("spec.externalName", spec.ExternalName, "not a DNS name")
		}
	default:
		f.add("spec.type", string(spec.Type), "unknown type")
	}
	validatePorts(f, spec)
	for i, s := range spec.ExternalIPs {
		f.checkIP(fmt.Sprintf("spec.externalIPs[%d]", i), s, "")
	}
	for i, ing := range obj.Status.LoadBalancer.Ingress {
		if ing.IP != "" {
			f.checkIP(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), ing.IP, "")
		}
		if m := ing.IPMode; m != nil && *m != v1.LoadBalancerIPModeVIP && *m != v1.LoadBalancerIPModeProxy {
			f.add(fmt.Sprintf("status.loadBalancer.ingress[%d].ipMode", i), string(*m), "must be VIP or Proxy")
		}
	}
	field, ranges := sourceRanges(obj)
	for i, s := range ranges {
		if _, ok := ParsePrefix(s); !ok {
			if field == annotationSourceRanges {
				f.add("metadata.annotations["+annotationSourceRanges+"]", s, "not a CIDR")
			} else {
				f.add(fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), s, "not a CIDR")
			}
		}
	}
	switch p := spec.HealthCheckNodePort; {
	case p < 0 || p > 65535:
		f.add("spec.healthCheckNodePort", strconv.Itoa(int(p)), "must be between 0 and 65535")
	case p != 0 && (spec.Type != v1.ServiceTypeLoadBalancer || spec.ExternalTrafficPolicy != v1.ServiceExternalTrafficPolicyLocal):
		// The API server refuses it too: only a LoadBalancer with policy Local
		// has a health check for its load balancer to probe.
		f.add("spec.healthCheckNodePort", strconv.Itoa(int(p)), "may only be set when type is LoadBalancer and externalTrafficPolicy is Local")
	}
	switch spec.SessionAffinity {
	case "", v1.ServiceAffinityNone:
	case v1.ServiceAffinityClientIP:
		if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			// The API server's bounds: 0 < timeoutSeconds <= 86400.
			if t := *c.ClientIP.TimeoutSeconds; t <= 0 || t > maxAffinitySeconds {
				f.add("spec.sessionAffinityConfig.clientIP.timeoutSeconds", strconv.Itoa(int(t)), "must be between 1 and 86400")
			}
		}
	default:
		f.add("spec.sessionAffinity", string(spec.SessionAffinity), "must be None or ClientIP")
	}
	switch spec.ExternalTrafficPolicy {
	case "", v1.ServiceExternalTrafficPolicyCluster, v1.ServiceExternalTrafficPolicyLocal:
	default:
		f.add("spec.externalTrafficPolicy", string(spec.ExternalTrafficPolicy), "must be Cluster or Local")
	}
	if p := spec.InternalTrafficPolicy; p != nil && *p != v1.ServiceInternalTrafficPolicyCluster && *p != v1.ServiceInternalTrafficPolicyLocal {
		f.add("spec.internalTrafficPolicy", string(*p), "must be Cluster or Local")
	}
	return f.result()
}

// annotationSourceRanges is the older form of spec.loadBalancerSourceRanges, which
// kube-proxy still reads when the field is empty.
const annotationSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

// sourceRanges returns spec.loadBalancerSourceRanges, or the annotation's
// comma-separated list when the field is empty, each entry trimmed, and which of the
// two it came from.
func sourceRanges(obj *v1.Service) (string, []string) {
	field, raw := "spec.loadBalancerSourceRanges", obj.Spec.LoadBalancerSourceRanges
	if len(raw) == 0 {
		if a := strings.TrimSpace(obj.Annotations[annotationSourceRanges]); a != "" {
			field, raw = annotationSourceRanges, strings.Split(a, ",")
		}
	}
	out := make([]string, 0, len(raw))
	for _, s := range raw {
		out = append(out, strings.TrimSpace(s))
	}
	return field, out
}

// validateClusterIPs checks spec.clusterIP, spec.clusterIPs and their families.
func validateClusterIPs(f *fieldErrors, spec *v1.ServiceSpec) {
	if spec.ClusterIP != "" && len(spec.ClusterIPs) > 0 && spec.ClusterIPs[0] != spec.ClusterIP {
		f.add("spec.clusterIPs[0]", spec.ClusterIPs[0], fmt.Sprintf("must equal spec.clusterIP %q", spec.ClusterIP))
		return
	}
	ips := clusterIPStrings(spec)
	if len(ips) == 0 {
		f.add("spec.clusterIP", "", "not allocated (a proxy cannot serve a Service without one)")
		return
	}
	if len(ips) > 2 {
		f.add("spec.clusterIPs", fmt.Sprint(ips), "at most two addresses, one per family")
		return
	}
	field := func(i int) string {
		if len(spec.ClusterIPs) == 0 {
			return "spec.clusterIP"
		}
		return fmt.Sprintf("spec.clusterIPs[%d]", i)
	}
	validateFamilies(f, spec, ips)
	if ips[0] == v1.ClusterIPNone {
		if len(ips) > 1 {
			f.add("spec.clusterIPs", fmt.Sprint(ips), `"None" must be the only value`)
		}
		return
	}
	for i, s := range ips {
		var family v1.IPFamily
		if i < len(spec.IPFamilies) {
			family = spec.IPFamilies[i]
		}
		f.checkIP(field(i), s, family)
	}
	if len(ips) == 2 && f.err == nil && familyOf(mustParseAddr(ips[0])) == familyOf(mustParseAddr(ips[1])) {
		f.add("spec.clusterIPs[1]", ips[1], "must be of the other family than spec.clusterIPs[0]")
	}
}

// validateFamilies checks spec.ipFamilyPolicy and spec.ipFamilies against the
// ClusterIPs ips, as the API server does: a SingleStack Service has one family,
// a RequireDualStack one a ClusterIP of each (unless it is headless), and
// spec.ipFamilies names the family of every ClusterIP, each family once.
func validateFamilies(f *fieldErrors, spec *v1.ServiceSpec, ips []string) {
	policy := ""
	if spec.IPFamilyPolicy != nil {
		policy = string(*spec.IPFamilyPolicy)
		switch IPFamilyPolicy(policy) {
		case SingleStack, PreferDualStack, RequireDualStack:
		default:
			f.add("spec.ipFamilyPolicy", policy, "must be SingleStack, PreferDualStack or RequireDualStack")
		}
	}
	seen := map[v1.IPFamily]bool{}
	for i, fam := range spec.IPFamilies {
		at := fmt.Sprintf("spec.ipFamilies[%d]", i)
		switch {
		case fam != v1.IPv4Protocol && fam != v1.IPv6Protocol:
			f.add(at, string(fam), "must be IPv4 or IPv6")
		case seen[fam]:
			f.add(at, string(fam), "duplicate family")
		}
		seen[fam] = true
	}
	if len(spec.IPFamilies) > 2 {
		f.add("spec.ipFamilies", fmt.Sprint(spec.IPFamilies), "at most two families, one each")
	}
	headless := len(ips) > 0 && ips[0] == v1.ClusterIPNone
	allocated := len(ips)
	if headless {
		allocated = 0
	}
	if len(spec.IPFamilies) > 0 && allocated > len(spec.IPFamilies) {
		f.add("spec.ipFamilies", fmt.Sprint(spec.IPFamilies), "must name the family of every ClusterIP")
	}
	switch IPFamilyPolicy(policy) {
	case SingleStack:
		if allocated > 1 || len(spec.IPFamilies) > 1 {
			f.add("spec.ipFamilyPolicy", policy, "allows one family, not two")
		}
	case RequireDualStack:
		if !headless && allocated < 2 {
			f.add("spec.clusterIPs", fmt.Sprint(ips), "RequireDualStack needs a ClusterIP of each family")
		}
	}
}

// maxAffinitySeconds is the API server's upper bound for timeoutSeconds (one day).
const maxAffinitySeconds = 86400

// ianaSvcName is a port name as the API accepts it (IANA_SVC_NAME, lower-case).
var ianaSvcName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$`)

func validatePorts(f *fieldErrors, spec *v1.ServiceSpec) {
	names := make(map[string]bool)
	for i, p := range spec.Ports {
		at := fmt.Sprintf("spec.ports[%d]", i)
		if names[p.Name] {
			f.add(at+".name", p.Name, "duplicate port name")
		}
		names[p.Name] = true
		if p.Name == "" && len(spec.Ports) > 1 {
			f.add(at+".name", "", "required when a Service has more than one port")
		} else if p.Name != "" && len(validation.IsDNS1123Label(p.Name)) > 0 {
			f.add(at+".name", p.Name, "not a DNS label")
		}
		if p.Port < 1 || p.Port > 65535 {
			f.add(at+".port", strconv.Itoa(int(p.Port)), "must be between 1 and 65535")
		}
		switch p.Protocol {
		case "", v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		default:
			f.add(at+".protocol", string(p.Protocol), "must be TCP, UDP or SCTP")
		}
		if p.NodePort < 0 || p.NodePort > 65535 {
			f.add(at+".nodePort", strconv.Itoa(int(p.NodePort)), "must be between 0 and 65535")
		}
		tp := p.TargetPort
		if tp.StrVal != "" && !ianaSvcName.MatchString(tp.StrVal) {
			f.add(at+".targetPort", tp.StrVal, "not a port name")
		} else if tp.StrVal == "" && (tp.IntVal < 0 || tp.IntVal > 65535) {
			f.add(at+".targetPort", strconv.Itoa(int(tp.IntVal)), "must be between 1 and 65535")
		}
	}
}

func validateSlice(es *discoveryv1.EndpointSlice) error {
	f := &fieldErrors{kind: "endpointslice", obj: NamespacedName{Namespace: es.Namespace, Name: es.Name}}
	var family v1.IPFamily
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4:
		family = v1.IPv4Protocol
	case discoveryv1.AddressTypeIPv6:
		family = v1.IPv6Protocol
	case discoveryv1.AddressTypeFQDN:
		// FQDN slices carry names, not addresses; a proxy has nothing to do with them.
		f.add("addressType", string(es.AddressType), "FQDN slices are not supported")
		return f.result()
	default:
		f.add("addressType", string(es.AddressType), "must be IPv4 or IPv6")
	}
	for i, p := range es.Ports {
		at := fmt.Sprintf("ports[%d]", i)
		if p.Port != nil && (*p.Port < 1 || *p.Port > 65535) {
			f.add(at+".port", strconv.Itoa(int(*p.Port)), "must be between 1 and 65535")
		}
		if p.Protocol != nil {
			switch *p.Protocol {
			case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
			default:
				f.add(at+".protocol", string(*p.Protocol), "must be TCP, UDP or SCTP")
			}
		}
	}
	for i, e := range es.Endpoints {
		if len(e.Addresses) == 0 {
			f.add(fmt.Sprintf("endpoints[%d].addresses", i), "", "at least one address is required")
			continue
		}
		for j, a := range e.Addresses {
			f.checkEndpointIP(fmt.Sprintf("endpoints[%d].addresses[%d]", i, j), a, family)
		}
	}
	return f.result()
}

func validateEndpoints(ep *v1.Endpoints) error {
	f := &fieldErrors{kind: "endpoints", obj: NamespacedName{Namespace: ep.Namespace, Name: ep.Name}}
	for i, ss := range ep.Subsets {
		for j, a := range ss.Addresses {
			f.checkEndpointIP(fmt.Sprintf("subsets[%d].addresses[%d].ip", i, j), a.IP, "")
		}
		for j, a := range ss.NotReadyAddresses {
			f.checkEndpointIP(fmt.Sprintf("subsets[%d].notReadyAddresses[%d].ip", i, j), a.IP, "")
		}
		for j, p := range ss.Ports {
			if p.Port < 1 || p.Port > 65535 {
				f.add(fmt.Sprintf("subsets[%d].ports[%d].port", i, j), strconv.Itoa(int(p.Port)), "must be between 1 and 65535")
			}
			switch p.Protocol {
			case "", v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
			default:
				f.add(fmt.Sprintf("subsets[%d].ports[%d].protocol", i, j), string(p.Protocol), "must be TCP, UDP or SCTP")
			}
		}
	}
	return f.result()
}
