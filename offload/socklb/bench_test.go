package socklb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/service"
)

// BenchmarkOneServiceChange measures the socket LB's target: at 10,000 Services, one
// Service's endpoints change (a pod replaced); the time is Maps.Sync, from
// the Snapshot to the last map update (render the changed port, compare,
// write one services element and its slots). Against the Fake (the Maps'
// own cost) and the real Kernel (root: the maps and programs attached to a
// cgroup of the benchmark's own). Target: < 5 ms. Run by make bench only.
func BenchmarkOneServiceChange(b *testing.B) {
	const n = 10000
	for _, k := range []struct {
		name string
		lb   func(b *testing.B) ksocklb.Interface
	}{
		{"fake", func(*testing.B) ksocklb.Interface { return ksocklb.NewFake() }},
		{"kernel", benchKernel},
	} {
		b.Run(fmt.Sprintf("%s/services=%d", k.name, n), func(b *testing.B) {
			ctx := context.Background()
			lb := k.lb(b)
			p, err := NewMaps(Config{LB: lb, Node: dataplane.Node{NodeName: "node-a"}, CheckPeriod: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			svcs := benchCluster(n)
			snap := service.NewSnapshot(svcs, nil)
			start := time.Now()
			if err := p.Sync(ctx, snap); err != nil {
				b.Fatal(err)
			}
			firstSync := time.Since(start)
			changed := n / 2
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				svcs = append([]*service.Service(nil), svcs...)
				svcs[changed] = benchService(changed, i+1)
				next := service.NewSnapshot(svcs, nil)
				before := p.Health().Sets
				b.StartTimer()
				if err := p.Sync(ctx, next); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if sets := p.Health().Sets - before; sets != 1 {
					b.Fatalf("one Service changed, %d elements set; want 1", sets)
				}
				b.StartTimer()
			}
			b.StopTimer()
			// The first sync writes all 10,000: for the record, not the target.
			b.ReportMetric(firstSync.Seconds()*1000, "first-sync-ms")
		})
	}
}

// benchCluster is n single-port TCP Services "default/svc-<i>" with
// ClusterIPs 198.18.x.y and 3 endpoints each (bench/iptables' cluster).
func benchCluster(n int) []*service.Service {
	svcs := make([]*service.Service, 0, n)
	for i := range n {
		svcs = append(svcs, benchService(i, 0))
	}
	return svcs
}

// benchService is Service i; gen moves its endpoints (a pod replaced).
func benchService(i, gen int) *service.Service {
	name := service.NamespacedName{Namespace: "default", Name: fmt.Sprintf("svc-%05d", i)}
	s := &service.Service{NamespacedName: name, Type: service.TypeClusterIP,
		ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})}}
	p := &service.Port{Name: service.PortName{NamespacedName: name, Port: "http", Protocol: service.TCP},
		Service: s, Port: 80, Protocol: service.TCP}
	for e := range 3 {
		k := (i*3 + e + gen) % (1 << 14) // 198.19.64.0/18
		ip := netip.AddrFrom4([4]byte{198, 19, byte(64 + k>>8), byte(k)})
		p.Endpoints = append(p.Endpoints, service.Endpoint{Addr: netip.AddrPortFrom(ip, 8080), Ready: true, Serving: true, NodeName: "node-a"})
	}
	s.Ports = []*service.Port{p}
	return s
}

// benchKernel loads the socket LB on a cgroup of the benchmark's own: a
// child of the machine's cgroup2 mount (netnstest.Cgroup2), where nothing
// runs. Everything goes at the end, the programs first.
func benchKernel(b *testing.B) ksocklb.Interface {
	b.Helper()
	netnstest.RequireRoot(b)
	mnt := netnstest.Cgroup2(b)
	var r [4]byte
	_, _ = rand.Read(r[:])
	cg := filepath.Join(mnt, "svcp-socklb-bench-"+hex.EncodeToString(r[:]))
	if err := os.Mkdir(cg, 0o755); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := os.Remove(cg); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.Errorf("remove cgroup %s: %v", cg, err)
		}
	})
	k, err := ksocklb.New(ksocklb.Config{CgroupPath: cg})
	if err != nil {
		b.Skipf("socklb.New: %v", err)
	}
	b.Cleanup(func() {
		if err := k.Close(); err != nil {
			b.Errorf("detach: %v", err)
		}
	})
	return k
}
