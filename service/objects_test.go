package service

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestJoinKeepsObjects joins the same converted objects again and again, as
// a watcher does after each change, and reads the Snapshots as the
// dataplanes do: the converted objects, which the informers cache and Join
// shares with the Snapshots where it can, must stay exactly as they were.
func TestJoinKeepsObjects(t *testing.T) {
	web := ConvertService(svc("web"))
	idle := ConvertService(svc("idle", func(s *v1.Service) { s.Spec.ClusterIP = "198.18.0.11" }))
	ports := []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}
	one := ConvertSlice(slice("web-1", "web", ports, ep("198.19.0.1", true)))
	// Out of address order, with one address twice, and one a ClusterIP.
	two := ConvertSlice(slice("web-1", "web", ports, ep("198.19.0.3", false), ep("198.19.0.2", true), ep("198.19.0.3", true), ep("198.18.0.11", true)))
	objects := []any{web, idle, one, two}
	before := make([]string, len(objects))
	for i, o := range objects {
		before[i] = dump(o)
	}

	first := Join([]*ServiceObject{web, idle}, []*SliceObject{one}, nil)
	second := Join([]*ServiceObject{web, idle}, []*SliceObject{two}, nil)
	for _, s := range []*Snapshot{first, second} {
		s.Family(IPv4)
		s.Family(IPv6)
		RefuseEndpoints(s, func(e Endpoint) string { return "refused" })
		for _, p := range s.Ports() {
			p.Ready()
			p.Categorize("node-1", &Node{Name: "node-1", Labels: map[string]string{"topology.kubernetes.io/zone": "zone-a"}})
		}
	}
	for i, o := range objects {
		if after := dump(o); after != before[i] {
			t.Errorf("converted object %d changed:\n%s\nwas:\n%s", i, after, before[i])
		}
	}

	endpoints := func(s *Snapshot) []string {
		var out []string
		for _, e := range s.Services()[1].Ports[0].Endpoints {
			out = append(out, e.String()+map[bool]string{true: " ready", false: ""}[e.Ready])
		}
		return out
	}
	if got := endpoints(first); !slices.Equal(got, []string{"198.19.0.1:8080 ready"}) {
		t.Errorf("first Snapshot: endpoints %v, want [198.19.0.1:8080 ready]", got)
	}
	// Of the two 198.19.0.3, the first in the slice wins.
	if got := endpoints(second); !slices.Equal(got, []string{"198.19.0.2:8080 ready", "198.19.0.3:8080"}) {
		t.Errorf("second Snapshot: endpoints %v, want [198.19.0.2:8080 ready 198.19.0.3:8080]", got)
	}
	if errs := second.Errors(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "endpoints[3].addresses[0]") {
		t.Errorf("second Snapshot: errors %v, want the ClusterIP refused, named by its index in the slice", errs)
	}
	if first.Services()[1] == second.Services()[1] {
		t.Error("two Snapshots share a Service with endpoints")
	}
	if p := second.Services()[1].Ports[0]; p.Service != second.Services()[1] {
		t.Error("a port's Service is not the Service that holds it")
	}
	// What is shared: a Service without endpoints, a slice's endpoints.
	if first.Services()[0] != idle.svc || second.Services()[0] != idle.svc {
		t.Error("a Service without endpoints is copied, not shared")
	}
	if got := first.Services()[1].Endpoints; len(got) != 1 || &got[0] != &one.endpoints[0] {
		t.Error("the endpoints of a Service with one slice are copied, not shared")
	}
}

// dump writes out everything v reaches (unexported fields too; a pointer
// met again is written once), for telling whether any of it changed.
func dump(v any) string {
	d := dumper{seen: map[uintptr]bool{}}
	d.value(reflect.ValueOf(v))
	return d.String()
}

type dumper struct {
	strings.Builder
	seen map[uintptr]bool
}

func (d *dumper) value(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		switch {
		case v.IsNil():
			d.WriteString("nil")
		case v.Kind() == reflect.Interface:
			d.value(v.Elem())
		case d.seen[v.Pointer()]:
			d.WriteString("<seen>")
		default:
			d.seen[v.Pointer()] = true
			d.WriteString("&")
			d.value(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		d.WriteString("[")
		for i := range v.Len() {
			d.value(v.Index(i))
			d.WriteString(" ")
		}
		d.WriteString("]")
	case reflect.Map:
		var entries []string
		for it := v.MapRange(); it.Next(); {
			entries = append(entries, dump(it.Key())+":"+dump(it.Value()))
		}
		slices.Sort(entries)
		fmt.Fprint(d, entries)
	case reflect.Struct:
		d.WriteString("{")
		for i := range v.NumField() {
			d.WriteString(v.Type().Field(i).Name + ":")
			d.value(v.Field(i))
			d.WriteString(" ")
		}
		d.WriteString("}")
	default:
		fmt.Fprint(d, v)
	}
}

// TestConvertErrors: an invalid object keeps its error, Join reports it and
// leaves the object out.
func TestConvertErrors(t *testing.T) {
	bad := ConvertService(svc("bad", func(s *v1.Service) { s.Spec.ClusterIP = "999.1.1.1" }))
	if bad.Err() == nil || bad.Name() != (NamespacedName{Namespace: "default", Name: "bad"}) {
		t.Fatalf("ConvertService: err %v, name %v", bad.Err(), bad.Name())
	}
	snap := Join([]*ServiceObject{bad, ConvertService(svc("web"))}, nil, nil)
	if snap.Len() != 1 || len(snap.Errors()) != 1 || snap.Errors()[0].Error() != bad.Err().Error() {
		t.Errorf("Join: %d Services, errors %v; want 1 and %v", snap.Len(), snap.Errors(), bad.Err())
	}
}

// A Joiner shares a Service with the last Snapshot when its converted object
// and slices are the same objects and none of its endpoints is refused now;
// what it makes is what Join makes.
func TestJoinerReusesUnchanged(t *testing.T) {
	ports := []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)}
	web := ConvertService(svc("web"))
	api := ConvertService(svc("api", func(s *v1.Service) { s.Spec.ClusterIP = "198.18.0.20" }))
	webEPs := ConvertSlice(slice("web-1", "web", ports, ep("198.19.0.1", true)))
	apiA := ConvertSlice(slice("api-1", "api", ports, ep("198.19.0.2", true)))
	apiB := ConvertSlice(slice("api-2", "api", ports, ep("198.19.0.3", true)))
	// A Service whose ClusterIP is api's endpoint: api's endpoint is refused
	// while it exists.
	clash := ConvertService(svc("clash", func(s *v1.Service) { s.Spec.ClusterIP = "198.19.0.2" }))

	j := new(Joiner)
	joins := []struct {
		services []*ServiceObject
		slices   []*SliceObject
		reused   []string // the Services shared with the Join before
		errs     int
	}{
		{[]*ServiceObject{web, api}, []*SliceObject{webEPs, apiA, apiB}, nil, 0},
		{[]*ServiceObject{api, web}, []*SliceObject{apiB, webEPs, apiA}, []string{"api", "web"}, 0}, // another order
		{[]*ServiceObject{web, api}, []*SliceObject{webEPs, apiA}, []string{"web"}, 0},              // api lost a slice
		{[]*ServiceObject{web, api, clash}, []*SliceObject{webEPs, apiA}, []string{"web"}, 1},
		{[]*ServiceObject{web, api, clash}, []*SliceObject{webEPs, apiA}, []string{"clash", "web"}, 1}, // refused again, and said again; clash has no endpoints: shared always
		{[]*ServiceObject{web, api}, []*SliceObject{webEPs, apiA}, []string{"web"}, 0},
		{[]*ServiceObject{web, api}, []*SliceObject{webEPs, apiA}, []string{"api", "web"}, 0},
	}
	last := NewSnapshot(nil, nil)
	for i, tt := range joins {
		snap := j.Join(tt.services, tt.slices, nil)
		if want := Join(tt.services, tt.slices, nil); dump(snap.Services()) != dump(want.Services()) {
			t.Errorf("join %d: the Joiner's Snapshot differs from Join's:\n%s\nwant:\n%s", i, dump(snap.Services()), dump(want.Services()))
		}
		if len(snap.Errors()) != tt.errs {
			t.Errorf("join %d: errors %v, want %d", i, snap.Errors(), tt.errs)
		}
		var reused []string
		for _, s := range snap.Services() {
			if prev, ok := last.Service(s.NamespacedName); ok && prev == s {
				reused = append(reused, s.Name)
			}
			for _, p := range s.Ports {
				if p.Service != s {
					t.Errorf("join %d: a port of %s belongs to another Service", i, s.NamespacedName)
				}
			}
		}
		if !slices.Equal(reused, tt.reused) && len(reused)+len(tt.reused) > 0 {
			t.Errorf("join %d: shared %v with the last Snapshot, want %v", i, reused, tt.reused)
		}
		last = snap
	}
}
