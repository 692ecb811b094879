package servicetest

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// Unrendered are the fields of a service port that no kernel path's renderer
// reads, by their path from the Port, each with the reason:
// service.Port.RendersSameAs compares every other field. The tests hold both
// sides to it: service's tests fail when RendersSameAs misses a field that is
// not listed here (a new field of Port, Service or Endpoint included), and
// each renderer's tests fail when varying a listed field changes what it
// writes.
var Unrendered = map[string]string{
	"TargetPort":                       "the endpoints carry the port it resolves to",
	"Service.Headless":                 "a headless Service has no ClusterIPs, and the ClusterIPs are compared",
	"Service.IPFamilies":               "the ClusterIPs say which families the Service has",
	"Service.IPFamilyPolicy":           "the ClusterIPs say which families the Service has",
	"Service.ExternalName":             "the DNS's: an ExternalName Service has no ClusterIPs",
	"Service.PublishNotReadyAddresses": "the DNS's",
	"Service.TrafficDistribution":      "the endpoints' hints carry it (service.Port.Categorize)",
	"Service.Triggers":                 "the sync latency metric's",
	"Service.Endpoints":                "the DNS's: the port has its own",
	"Endpoints[0].Zone":                "hints name zones, not the endpoint's own (service.Port.Categorize)",
	"Endpoints[0].Hostname":            "the DNS's",
}

// Variant is a Snapshot that differs from Variants' base in one field of its
// port (or of the port's Service, or of one of its endpoints).
type Variant struct {
	// Field is the field's path from the Port: "NodePort",
	// "Service.Affinity.Timeout", "Endpoints[0].Zone"; "Endpoints" alone is
	// the list without its last endpoint, "Service.Ports" the Service's ports
	// in the other order.
	Field string
	// Unrendered: Field is one of Unrendered's.
	Unrendered bool
	// Snap is the base Snapshot with the field changed, and Port the port in it.
	Snap *service.Snapshot
	Port *service.Port
}

// VariantPort is the name of the port Variants varies: default/web:p, the first
// of web's two ports.
var VariantPort = service.PortName{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"}, Port: "p", Protocol: service.TCP}

// VariantBase is the Snapshot Variants varies: one Service, web, with every
// field a renderer may read set (NodePorts, externalIPs, a LoadBalancer IP
// with source ranges, a health check node port, ClientIP affinity,
// externalTrafficPolicy Local, annotations) and every field no renderer reads
// set too, on a node in zone-a. Its port p has four endpoints of every
// condition, local and remote, hinted for zones, and all but one for nodes
// too: zone hints are in force (service.Port.Categorize). Its second port, q,
// makes p's place among them count. Each call returns a new one.
func VariantBase() *service.Snapshot {
	eps := []service.Endpoint{
		Hinted(Endpoint("198.19.1.10:8080", ThisNode), ThisNode, "zone-a"),
		Terminating(Hinted(Endpoint("198.19.1.11:8080", ThisNode), ThisNode, "zone-a")),
		Hinted(Endpoint("198.19.1.130:8080", "node-b"), "node-b", "zone-a"),
		Hinted(Endpoint("198.19.1.131:8080", "node-b"), "", "zone-b"),
	}
	for i := range eps {
		eps[i].Zone, eps[i].Hostname = "zone-a", fmt.Sprintf("web-%d", i)
	}
	eps[3].Zone = "zone-b"
	s := Service("web", "198.18.0.10", 80, eps, WithNodePort(30080), WithExternalIPs("198.18.100.1"),
		WithLoadBalancer("198.18.200.1"), WithSourceRanges("203.0.113.0/25", "198.19.0.0/24"), WithHealthCheck(32000),
		WithAffinity(10*time.Minute), WithExternalLocal())
	s.IPFamilies, s.IPFamilyPolicy = []service.Family{service.IPv4}, service.SingleStack
	s.TrafficDistribution = service.TopologyPreferSameZone
	s.Annotations = map[string]string{"example.com/team": "web"}
	s.Triggers = []service.Trigger{{Slice: "web-1", Family: service.IPv4, At: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	s.Ports[0].TargetPort = "http"
	q := &service.Port{Name: VariantPort, Service: s, Port: 443, Protocol: service.TCP, NodePort: 30443, TargetPort: "https",
		Endpoints: []service.Endpoint{Endpoint("198.19.1.10:8443", ThisNode), Endpoint("198.19.1.130:8443", "node-b")}}
	q.Name.Port = "q"
	s.Ports = append(s.Ports, q)
	for _, e := range eps {
		e.Addr = netip.AddrPortFrom(e.Addr.Addr(), 0)
		s.Endpoints = append(s.Endpoints, e)
	}
	snap := Snapshot(s)
	snap = snap.With(service.WithNode(InZone("zone-a")))
	return snap
}

// Variants returns a Variant of VariantBase for every field of VariantPort:
// every exported field of service.Port, of its Service and of its endpoints,
// found by reflection, so that a field added to one of them gets a variant
// with no change here. A field of a kind it cannot vary panics, as does an
// entry of Unrendered that names no field.
func Variants() []Variant {
	var paths [][]string
	walk(reflect.TypeFor[service.Port](), nil, &paths)
	listed := map[string]bool{}
	var out []Variant
	for _, path := range paths {
		field := strings.Join(path, ".")
		_, unrendered := Unrendered[field]
		listed[field] = unrendered
		snap, port := varied(path)
		out = append(out, Variant{Field: field, Unrendered: unrendered, Snap: snap, Port: port})
	}
	for field := range Unrendered {
		if !listed[field] {
			panic("servicetest: Unrendered names " + field + ", which is no field of service.Port")
		}
	}
	return out
}

// walk appends to paths the path of every field below the struct type t at
// path that Variants varies on its own.
func walk(t reflect.Type, path []string, paths *[][]string) {
	for f := range t.Fields() {
		if !f.IsExported() {
			panic(fmt.Sprintf("servicetest: %s.%s is not exported: Variants cannot vary it", t, f.Name))
		}
		p := append(slices.Clone(path), f.Name)
		if _, ok := Unrendered[strings.Join(p, ".")]; ok || leaf(f.Type) {
			*paths = append(*paths, p)
			continue
		}
		switch {
		case f.Type.Kind() == reflect.Struct:
			walk(f.Type, p, paths)
		case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct:
			walk(f.Type.Elem(), p, paths) // Port.Service
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			*paths = append(*paths, p) // one endpoint fewer
			elem := append(slices.Clone(path), f.Name+"[0]")
			walk(f.Type.Elem(), elem, paths)
		default:
			panic(fmt.Sprintf("servicetest: field %s of type %s: Variants cannot vary it", strings.Join(p, "."), f.Type))
		}
	}
}

// leaf reports whether a field of type t is varied as a whole.
func leaf(t reflect.Type) bool {
	switch t {
	case reflect.TypeFor[netip.Addr](), reflect.TypeFor[netip.AddrPort](), reflect.TypeFor[netip.Prefix](),
		reflect.TypeFor[time.Time](), reflect.TypeFor[[]*service.Port]():
		return true
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String, reflect.Int, reflect.Int64, reflect.Uint16, reflect.Uint32, reflect.Map:
		return true
	case reflect.Slice:
		return t.Elem().Kind() != reflect.Struct || leaf(t.Elem())
	}
	return false
}

// varied returns VariantBase with the field at path of VariantPort changed,
// and the port.
func varied(path []string) (*service.Snapshot, *service.Port) {
	base := VariantBase()
	p, _ := base.Port(VariantPort)
	v := reflect.ValueOf(p).Elem()
	for _, name := range path {
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if n, ok := strings.CutSuffix(name, "[0]"); ok {
			v = v.FieldByName(n).Index(0)
			continue
		}
		v = v.FieldByName(name)
	}
	v.Set(change(v))
	return service.NewSnapshot(base.Services(), nil, service.WithNode(base.Node())), p
}

// alternatives are the values change gives a field of an enumerated type: the
// first one that differs from its value.
var alternatives = map[reflect.Type][]any{
	reflect.TypeFor[service.Protocol]():       {service.UDP, service.TCP},
	reflect.TypeFor[service.Type]():           {service.TypeNodePort, service.TypeClusterIP},
	reflect.TypeFor[service.IPFamilyPolicy](): {service.PreferDualStack, service.SingleStack},
	reflect.TypeFor[service.Family]():         {service.IPv6, service.IPv4},
}

// change returns a new value of v's type that differs from v, in a way a
// renderer reading it would notice: another address of the family, another
// port, a flipped flag, a slice without its last element or with its last
// element changed. v's slices and maps are copied, never modified: the other
// port shares its Service.
func change(v reflect.Value) reflect.Value {
	t := v.Type()
	for _, alt := range alternatives[t] {
		if a := reflect.ValueOf(alt); a.Interface() != v.Interface() {
			return a
		}
	}
	switch x := v.Interface().(type) {
	case netip.Addr:
		return reflect.ValueOf(x.Next())
	case netip.AddrPort:
		return reflect.ValueOf(netip.AddrPortFrom(x.Addr(), x.Port()+1))
	case netip.Prefix:
		return reflect.ValueOf(netip.PrefixFrom(x.Addr(), x.Bits()-1).Masked())
	case time.Time:
		return reflect.ValueOf(x.Add(time.Second))
	case time.Duration:
		return reflect.ValueOf(x + time.Second)
	case []*service.Port: // whether the port is its Service's first
		return reflect.ValueOf(slices.Concat(x[1:], x[:1]))
	}
	out := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Bool:
		out.SetBool(!v.Bool())
	case reflect.String:
		out.SetString(v.String() + "-changed")
	case reflect.Int, reflect.Int64:
		out.SetInt(v.Int() + 1)
	case reflect.Uint16, reflect.Uint32:
		out.SetUint(v.Uint() + 1)
	case reflect.Map:
		out = reflect.MakeMap(t)
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), it.Value())
		}
		out.SetMapIndex(reflect.ValueOf("example.com/changed"), reflect.ValueOf("yes"))
	case reflect.Slice:
		n := v.Len()
		if n == 0 {
			panic(fmt.Sprintf("servicetest: an empty %s in VariantBase: give it an element to vary", t))
		}
		if t.Elem().Kind() == reflect.Struct && !leaf(t.Elem()) {
			return v.Slice3(0, n-1, n-1) // one fewer; appending to it copies
		}
		out = reflect.MakeSlice(t, n, n)
		reflect.Copy(out, v)
		out.Index(n - 1).Set(change(v.Index(n - 1)))
	default:
		panic(fmt.Sprintf("servicetest: cannot change a %s", t))
	}
	return out
}
