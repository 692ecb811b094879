package dnsresolve

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service"
)

// manyServices is n ClusterIP Services with one named port and two endpoints,
// the shape bench/dns measures end to end.
func manyServices(n int) *service.Snapshot {
	svcs := make([]*service.Service, 0, n)
	for i := range n {
		s := newService(fmt.Sprintf("ns-%02d", i%50), fmt.Sprintf("svc-%05d", i),
			netip.AddrFrom4([4]byte{198, 18, byte((i + 1) >> 8), byte(i + 1)}).String())
		addPort(s, "http", service.TCP, 80,
			ep(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(2 * i >> 8), byte(2 * i)}), 8080).String(), "", true),
			ep(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte((2*i + 1) >> 8), byte(2*i + 1)}), 8080).String(), "", true))
		svcs = append(svcs, s)
	}
	return service.NewSnapshot(svcs, nil)
}

// BenchmarkNewIndex reports the cost of indexing one Snapshot, and the heap
// the Index keeps ("index-bytes").
func BenchmarkNewIndex(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			snap := manyServices(n)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			ix := NewIndex(snap, IndexConfig{TTL: 5})
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(ix)
			for b.Loop() {
				NewIndex(snap, IndexConfig{TTL: 5})
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc), "index-bytes")
		})
	}
}

// discard is a UDP ResponseWriter that drops the answer, packing it first
// when it comes as a dns.Msg, as the server's socket writer would.
type discard struct{ recorder }

func (d *discard) RemoteAddr() net.Addr { return clientAddr }
func (d *discard) WriteMsg(m *dns.Msg) error {
	_, err := m.Pack()
	return err
}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
