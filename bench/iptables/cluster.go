package iptables

import (
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/service"
)

// Cluster returns a Snapshot of n single-port TCP Services "default/svc-<i>" with
// ClusterIPs 198.18.x.y and 3 endpoints each. Services are ordered by name, so
// "svc-00000" comes first in SVCP-SERVICES.
func Cluster(n int) *service.Snapshot {
	svcs := make([]*service.Service, 0, n)
	for i := range n {
		svcs = append(svcs, Service(i, 0))
	}
	return service.NewSnapshot(svcs, nil)
}

// Service returns Service i of Cluster; gen changes its endpoints (a pod replaced).
func Service(i, gen int) *service.Service {
	name := service.NamespacedName{Namespace: "default", Name: fmt.Sprintf("svc-%05d", i)}
	s := &service.Service{
		NamespacedName: name,
		Type:           service.TypeClusterIP,
		ClusterIPs:     []netip.Addr{netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})},
	}
	p := &service.Port{
		Name:     service.PortName{NamespacedName: name, Port: "http", Protocol: service.TCP},
		Service:  s,
		Port:     80,
		Protocol: service.TCP,
	}
	for e := range 3 {
		// 198.19.64.0/18: room for 16,384 services' endpoints.
		k := (i*3 + e + gen) % (1 << 14)
		ip := netip.AddrFrom4([4]byte{198, 19, byte(64 + k>>8), byte(k)})
		p.Endpoints = append(p.Endpoints, service.Endpoint{Addr: netip.AddrPortFrom(ip, 8080), Ready: true, Serving: true, NodeName: "node-a"})
	}
	s.Ports = []*service.Port{p}
	return s
}

// Replace returns snap with Service i replaced by s (or added, when i == len).
func Replace(snap *service.Snapshot, i int, s *service.Service) *service.Snapshot {
	svcs := append([]*service.Service(nil), snap.Services()...)
	if i == len(svcs) {
		svcs = append(svcs, s)
	} else {
		svcs[i] = s
	}
	return service.NewSnapshot(svcs, nil)
}
