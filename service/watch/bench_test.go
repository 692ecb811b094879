package watch

import (
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkLoadFile reports what clusterdns and svcproxy spend on a manifests
// file before the first Snapshot: LoadManifests and the Snapshot's build, on
// a JSON List of n ClusterIP Services, each with one named port and an
// EndpointSlice of two ready endpoints (the file bench/dns writes).
//
//	go test -run XXX -bench LoadFile -cpuprofile /tmp/load.pprof ./service/watch
func BenchmarkLoadFile(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			data := benchList(b, n)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				objs, err := LoadManifests("bench.json", data)
				if err != nil {
					b.Fatal(err)
				}
				if snap := build(objs); snap.Len() != n {
					b.Fatalf("%d Services, want %d", snap.Len(), n)
				}
			}
		})
	}
}

// benchList is a JSON List of n Services and their EndpointSlices.
func benchList(b *testing.B, n int) []byte {
	b.Helper()
	items := make([]any, 0, 2*n)
	for i := range n {
		name, ns := fmt.Sprintf("svc-%05d", i), fmt.Sprintf("ns-%02d", i%50)
		items = append(items, map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{
				"clusterIP": fmt.Sprintf("198.18.%d.%d", (i+2)/256, (i+2)%256),
				"ports":     []any{map[string]any{"name": "http", "port": 80, "protocol": "TCP"}},
			},
		}, map[string]any{
			"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
			"metadata": map[string]any{
				"name": name + "-1", "namespace": ns,
				"labels": map[string]any{"kubernetes.io/service-name": name},
			},
			"addressType": "IPv4",
			"ports":       []any{map[string]any{"name": "http", "port": 8080, "protocol": "TCP"}},
			"endpoints": []any{
				map[string]any{"addresses": []any{fmt.Sprintf("198.19.%d.%d", (2*i)/256%256, (2*i)%256)}, "conditions": map[string]any{"ready": true}},
				map[string]any{"addresses": []any{fmt.Sprintf("198.19.%d.%d", (2*i+1)/256%256, (2*i+1)%256)}, "conditions": map[string]any{"ready": true}},
			},
		})
	}
	data, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		b.Fatal(err)
	}
	return data
}
