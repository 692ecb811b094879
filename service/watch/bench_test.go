package watch

import (
	"fmt"
	"testing"

	"github.com/svcproxy/svcproxy/internal/manifestgen"
)

// BenchmarkLoadFile reports what clusterdns and svcproxy spend on a manifests
// file before the first Snapshot: LoadManifests and the Snapshot's build, on
// the JSON List of n Services that bench/dns gives clusterdns
// (internal/manifestgen).
//
//	go test -run XXX -bench LoadFile -cpuprofile /tmp/load.pprof ./service/watch
func BenchmarkLoadFile(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			data, err := manifestgen.List(n)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				objs, err := LoadManifests("bench.json", data)
				if err != nil {
					b.Fatal(err)
				}
				if snap := build(objs, selection{}); snap.Len() != n {
					b.Fatalf("%d Services, want %d", snap.Len(), n)
				}
			}
		})
	}
}
