package service

import (
	"fmt"
	"runtime"
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
			svcs := make([]*ServiceObject, n)
			ess := make([]*SliceObject, n)
			for i := range n {
				name := fmt.Sprintf("svc-%05d", i)
				svcs[i] = ConvertService(svc(name, func(s *v1.Service) {
					s.Namespace = fmt.Sprintf("ns-%02d", i%50)
					s.Spec.ClusterIP = fmt.Sprintf("198.18.%d.%d", (i+1)>>8, (i+1)&0xff)
				}))
				es := slice(name+"-1", name, []discoveryv1.EndpointPort{port("http", 8080, v1.ProtocolTCP)},
					ep(fmt.Sprintf("198.19.%d.%d", (2*i)>>8&0xff, 2*i&0xff), true),
					ep(fmt.Sprintf("198.19.%d.%d", (2*i+1)>>8&0xff, (2*i+1)&0xff), true))
				es.Namespace = svcs[i].name.Namespace
				ess[i] = ConvertSlice(es)
			}
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
	}
}
