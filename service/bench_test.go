package service

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// BenchmarkJoin reports the cost of one Snapshot of n converted ClusterIP
// Services, each with one named port and one EndpointSlice of two ready
// endpoints (the shape bench/dns measures end to end), and the heap the
// Snapshot keeps beside the converted objects ("snapshot-bytes").
func BenchmarkJoin(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			svcs, ess := joinObjects(n)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			snap := Join(svcs, ess, nil)
			runtime.GC()
			runtime.ReadMemStats(&after)
			if snap.Len() != n || len(snap.Errors()) != 0 {
				b.Fatalf("%d Services, errors %v", snap.Len(), snap.Errors())
			}
			runtime.KeepAlive(snap)
			for b.Loop() {
				Join(svcs, ess, nil)
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc), "snapshot-bytes")
		})
		// A watcher's Snapshot after one change: one slice replaced, the
		// rest as the last Join had them (a Joiner's).
		b.Run(fmt.Sprintf("%d/one-change", n), func(b *testing.B) {
			svcs, ess := joinObjects(n)
			changed := slices.Clone(ess)
			changed[n/2] = ConvertSlice(sliceOf(n/2, svcs[n/2].name.Namespace, 1))
			states := [][]*SliceObject{ess, changed}
			j := new(Joiner)
			j.Join(svcs, ess, nil)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				j.Join(svcs, states[i%2], nil)
			}
		})
	}
}

// joinObjects are BenchmarkJoin's n converted Services and their slices.
func joinObjects(n int) ([]*ServiceObject, []*SliceObject) {
	svcs := make([]*ServiceObject, n)
	ess := make([]*SliceObject, n)
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		svcs[i] = ConvertService(svc(name, func(s *v1.Service) {
			s.Namespace = fmt.Sprintf("ns-%02d", i%50)
			s.Spec.ClusterIP = fmt.Sprintf("198.18.%d.%d", (i+1)>>8, (i+1)&0xff)
		}))
		ess[i] = ConvertSlice(sliceOf(i, svcs[i].name.Namespace, 0))
	}
	return svcs, ess
}

// sliceOf is Service i's slice of two ready endpoints; gen moves the second.
func sliceOf(i int, namespace string, gen int) *discoveryv1.EndpointSlice {
	name := fmt.Sprintf("svc-%05d", i)
	es := slice(name+"-1", name, []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)},
		ep(fmt.Sprintf("198.19.%d.%d", (2*i)>>8&0xff, 2*i&0xff), true),
		ep(fmt.Sprintf("198.19.%d.%d", (2*i+1+gen)>>8&0xff, (2*i+1+gen)&0xff), true))
	es.Namespace = namespace
	return es
}
