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

// BenchmarkServeDNS is one question through the handler, without sockets.
func BenchmarkServeDNS(b *testing.B) {
	s, err := New(Config{TTL: 5})
	if err != nil {
		b.Fatal(err)
	}
	s.Update(manyServices(20000))
	for _, q := range []struct{ name, qname string }{
		{"A", "svc-01234.ns-34.svc.cluster.local."},
		{"NXDOMAIN", "svc-01234.ns-34.svc.cluster.local.ns-01.svc.cluster.local."},
	} {
		b.Run(q.name, func(b *testing.B) {
			req := question(q.qname, dns.TypeA)
			w := &discard{}
			b.ReportAllocs()
			for b.Loop() {
				s.ServeDNS(w, req)
			}
		})
	}
}

// discard is a UDP ResponseWriter that packs and drops the answer, as the
// server's socket writer would pack it.
type discard struct{ recorder }

func (d *discard) RemoteAddr() net.Addr { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000} }
func (d *discard) WriteMsg(m *dns.Msg) error {
	_, err := m.Pack()
	return err
}
