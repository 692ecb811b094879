package service

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Build converts every API object each time it is called. A watcher that
// keeps objects between Snapshots (client-go informer caches) can instead
// convert each object once, as it arrives, keep only the result, and Join the
// results into a Snapshot: the converted forms below hold only what a
// Snapshot is made of, a fraction of the API object, and a Snapshot built
// after one change converts nothing again. Build is exactly such a
// conversion followed by Join.

// ServiceObject is one Service converted on its own: validated, without
// endpoints, or the error that keeps it out of every Snapshot. It is
// immutable: Join copies a Service to attach its endpoints, and shares one
// that has none.
type ServiceObject struct {
	name    NamespacedName
	created time.Time // metadata.creationTimestamp: the order of ClusterIP allocation
	svc     *Service  // nil when err is not
	err     error
}

// ConvertService validates and converts obj, which it does not keep.
func ConvertService(obj *v1.Service) *ServiceObject {
	o := &ServiceObject{name: NamespacedName{Namespace: obj.Namespace, Name: obj.Name}, created: obj.CreationTimestamp.Time}
	o.svc, o.err = convertService(obj)
	return o
}

// Name is the Service's namespace and name.
func (o *ServiceObject) Name() NamespacedName { return o.name }

// Err is the validation error that keeps the Service out, or nil.
func (o *ServiceObject) Err() error { return o.err }

// SliceObject is one EndpointSlice converted on its own: the Service it
// belongs to, its ports and its endpoints (their first address, port 0), or
// the error that keeps it out. It is immutable: a Snapshot may share its
// endpoints (attachSlices).
type SliceObject struct {
	name      NamespacedName // the slice's own
	service   string         // label kubernetes.io/service-name; "": no Service's
	ports     []slicePort
	endpoints []Endpoint // sorted by address
	index     []int      // endpoints[j] is the object's endpoints[index[j]]; nil: the same j
	err       error
	trigger   Trigger // endpoints.kubernetes.io/last-change-trigger-time; zero At: none
}

// slicePort is one of a slice's ports, with the API's defaults applied
// (an unset name is "", an unset protocol TCP).
type slicePort struct {
	name     string
	protocol Protocol
	port     uint16
	set      bool // port was set: a slice port without a number matches nothing
}

// ConvertSlice validates and converts es, which it does not keep.
func ConvertSlice(es *discoveryv1.EndpointSlice) *SliceObject {
	o := &SliceObject{name: NamespacedName{Namespace: es.Namespace, Name: es.Name}}
	if o.err = validateSlice(es); o.err != nil {
		return o
	}
	o.service = es.Labels[discoveryv1.LabelServiceName]
	o.trigger = sliceTrigger(es)
	o.ports = make([]slicePort, len(es.Ports))
	for i, sp := range es.Ports {
		p := slicePort{protocol: TCP}
		if sp.Name != nil {
			p.name = *sp.Name
		}
		if sp.Protocol != nil {
			p.protocol = Protocol(*sp.Protocol)
		}
		if sp.Port != nil {
			p.port, p.set = uint16(*sp.Port), true
		}
		o.ports[i] = p
	}
	o.endpoints = make([]Endpoint, len(es.Endpoints))
	for i, e := range es.Endpoints {
		o.endpoints[i] = sliceEndpoint(e)
	}
	// Sorted by address, a Service with one slice shares them (attachSlices).
	// The sort is stable: of two endpoints with one address, the first in
	// the slice still wins.
	if !slices.IsSortedFunc(o.endpoints, byAddr) {
		o.index = make([]int, len(o.endpoints))
		for i := range o.index {
			o.index[i] = i
		}
		slices.SortStableFunc(o.index, func(a, b int) int { return byAddr(o.endpoints[a], o.endpoints[b]) })
		sorted := make([]Endpoint, len(o.endpoints))
		for i, j := range o.index {
			sorted[i] = o.endpoints[j]
		}
		o.endpoints = sorted
	}
	return o
}

// field is the index in the API object of endpoints[j], for errors.
func (o *SliceObject) field(j int) int {
	if o.index == nil {
		return j
	}
	return o.index[j]
}

// Name is the slice's namespace and name.
func (o *SliceObject) Name() NamespacedName { return o.name }

// Err is the validation error that keeps the slice out, or nil.
func (o *SliceObject) Err() error { return o.err }

// port finds the number that the slice gives to service port p: the slice
// port with the same name and protocol.
func (o *SliceObject) port(p *Port) (uint16, bool) {
	for _, sp := range o.ports {
		if sp.name == p.Name.Port && sp.protocol == p.Protocol && sp.set {
			return sp.port, true
		}
	}
	return 0, false
}

// Join makes the Snapshot of converted Services and EndpointSlices and of v1
// Endpoints objects (for Services without slices), as Build does for API
// objects. Neither services nor slices are modified; the Snapshot may share
// what they hold (a Service without endpoints, a slice's endpoints), which
// is safe because both are immutable (TestJoinKeepsObjects).
func Join(services []*ServiceObject, slices []*SliceObject, endpoints []*v1.Endpoints, opts ...SnapshotOption) *Snapshot {
	return new(Joiner).Join(services, slices, endpoints, opts...)
}

// Joiner joins as Join does, for a source that joins its caches again after
// every change (service/watch): a Service whose converted object and
// EndpointSlices are the same objects as at its last Join, none of whose
// endpoints is refused now, is the Service that Join made, not a new copy.
// At 10,000 Services a Snapshot after one change then makes one Service,
// not 10,000 with their endpoint lists, and the Snapshots a dataplane still
// holds (the rendered ports keep the Ports they were rendered from) share
// one copy of the unchanged Services with the newest, which also makes
// Port.RendersSameAs a comparison of pointers for them
// (docs/benchmarks/kubeproxy.md). The zero Joiner is ready; it is not safe
// for concurrent use.
type Joiner struct {
	prev map[NamespacedName]joined // what the last Join made of each Service with slices
}

// joined is what a Join made of one Service with EndpointSlices, without
// errors: the converted Service it copied (a ServiceObject's, so the same
// pointer is the same object), the slices it attached, and the copy.
type joined struct {
	from   *Service
	slices []*SliceObject
	svc    *Service
}

// Join is Join, reusing what the last Join made where nothing it was made
// from has changed.
func (j *Joiner) Join(services []*ServiceObject, slices []*SliceObject, endpoints []*v1.Endpoints, opts ...SnapshotOption) *Snapshot {
	var errs []error

	slicesBySvc := make(map[NamespacedName][]*SliceObject)
	for _, es := range slices {
		if es.err != nil {
			errs = append(errs, es.err)
			continue
		}
		if es.service == "" {
			continue // not managed for a Service; kube-proxy ignores it too
		}
		key := NamespacedName{Namespace: es.name.Namespace, Name: es.service}
		slicesBySvc[key] = append(slicesBySvc[key], es)
	}
	legacy := make(map[NamespacedName]*v1.Endpoints)
	for _, ep := range endpoints {
		if err := validateEndpoints(ep); err != nil {
			errs = append(errs, err)
			continue
		}
		legacy[NamespacedName{Namespace: ep.Namespace, Name: ep.Name}] = ep
	}

	out := make([]*Service, 0, len(services))
	vips := newAllocator(len(services))
	for _, o := range byCreation(services) {
		err := o.err
		if err == nil {
			err = vips.allocate(o.svc)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, o.svc)
	}
	// Endpoints last, once every virtual address is known: an endpoint must
	// not be one of them. A Service with endpoints is a copy of the
	// converted one, which stays without; one without is shared.
	next := make(map[NamespacedName]joined, len(j.prev))
	for i, svc := range out {
		if ess := slicesBySvc[svc.NamespacedName]; len(ess) > 0 {
			if was, ok := j.prev[svc.NamespacedName]; ok && was.from == svc && sameObjects(was.slices, ess) &&
				!vips.refusesAny(was.svc.Endpoints) {
				out[i] = was.svc
				next[svc.NamespacedName] = was
				continue
			}
			out[i] = svc.copy()
			refused := attachSlices(out[i], ess, vips.refuse)
			errs = append(errs, refused...)
			if len(refused) == 0 { // one with errors is joined again, and its errors said again
				next[svc.NamespacedName] = joined{from: svc, slices: ess, svc: out[i]}
			}
		} else if ep := legacy[svc.NamespacedName]; ep != nil {
			out[i] = svc.copy()
			errs = append(errs, attachEndpoints(out[i], ep, vips.refuse)...)
		}
	}
	j.prev = next
	return NewSnapshot(out, errs, opts...)
}

// sameObjects reports whether a and b hold the same slices, in any order (an
// informer's cache lists them in no fixed order).
func sameObjects(a, b []*SliceObject) bool {
	if len(a) != len(b) {
		return false
	}
	for _, es := range b {
		if !slices.Contains(a, es) {
			return false
		}
	}
	return true
}

// byCreation orders Services as the API server's ClusterIP allocator saw them:
// by creation time, then by namespace and name (a manifests file sets no
// creation time: name order decides).
func byCreation(services []*ServiceObject) []*ServiceObject {
	out := slices.Clone(services)
	slices.SortStableFunc(out, func(a, b *ServiceObject) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.name.Namespace, b.name.Namespace), cmp.Compare(a.name.Name, b.name.Name))
	})
	return out
}

// copy returns a Service of its own for a Snapshot: the struct and its ports
// are new (endpoints are attached to them), the immutable slices of addresses
// and the annotations are shared.
func (s *Service) copy() *Service {
	c := *s
	c.Ports = make([]*Port, len(s.Ports))
	for i, p := range s.Ports {
		pc := *p
		pc.Service = &c
		c.Ports[i] = &pc
	}
	return &c
}

// refusedEndpoint is attachSlices' error for an endpoint address that refuse
// names a reason for.
func refusedEndpoint(es *SliceObject, j int, ip netip.Addr, why string) error {
	return &InvalidError{Kind: "endpointslice", Object: es.name,
		Field: fmt.Sprintf("endpoints[%d].addresses[0]", j), Value: ip.String(), Reason: why}
}

// Trigger is when the change an EndpointSlice holds was triggered: its
// endpoints.kubernetes.io/last-change-trigger-time annotation, which the
// EndpointSlice controller sets to the time of the Pod or Service change
// behind it. kube-proxy's network programming duration starts there
// (EndpointsChangeTracker.EndpointSliceUpdate, getLastChangeTriggerTime).
type Trigger struct {
	Slice  string // the slice's name
	Family Family // its addressType
	At     time.Time
}

// sliceTrigger reads es's annotation; an absent or unparsable one is no
// trigger, as kube-proxy ignores it.
func sliceTrigger(es *discoveryv1.EndpointSlice) Trigger {
	v, ok := es.Annotations[v1.EndpointsLastChangeTriggerTime]
	if !ok {
		return Trigger{}
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return Trigger{}
	}
	return Trigger{Slice: es.Name, Family: Family(es.AddressType), At: at}
}
