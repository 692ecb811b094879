package dnsresolve_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/dnsresolve"
	"github.com/svcproxy/svcproxy/internal/exampletest"
	"github.com/svcproxy/svcproxy/service"
)

// A Snapshot with one Service becomes an Index; a question is one map lookup.
func ExampleIndex_Lookup() {
	web := &service.Service{
		NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"},
		Type:           service.TypeClusterIP,
		ClusterIPs:     []netip.Addr{netip.MustParseAddr("198.18.0.10")},
	}
	web.Ports = []*service.Port{{
		Name:     service.PortName{NamespacedName: web.NamespacedName, Port: "http", Protocol: service.TCP},
		Service:  web,
		Port:     80,
		Protocol: service.TCP,
	}}
	ix := dnsresolve.NewIndex(service.NewSnapshot([]*service.Service{web}, nil),
		dnsresolve.IndexConfig{Zone: "cluster.local", TTL: 5, Serial: 1})

	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"web.default.svc.cluster.local.", dns.TypeA},
		{"_http._tcp.web.default.svc.cluster.local.", dns.TypeSRV},
		{"10.0.18.198.in-addr.arpa.", dns.TypePTR},
		{"db.default.svc.cluster.local.", dns.TypeA},
	} {
		r, _ := ix.Lookup(q.name, q.qtype)
		fmt.Println(dns.RcodeToString[r.Rcode])
		for _, rr := range r.Answer {
			fmt.Println(" ", rr)
		}
	}
	// Output:
	// NOERROR
	//   web.default.svc.cluster.local.	5	IN	A	198.18.0.10
	// NOERROR
	//   _http._tcp.web.default.svc.cluster.local.	5	IN	SRV	0 100 80 web.default.svc.cluster.local.
	// NOERROR
	//   10.0.18.198.in-addr.arpa.	5	IN	PTR	web.default.svc.cluster.local.
	// NXDOMAIN
}

// TestExampleIndex_Lookup logs what ExampleIndex_Lookup prints: go test -v shows a test's log, never an
// Example's output (internal/exampletest).
func TestExampleIndex_Lookup(t *testing.T) { exampletest.Log(t, ExampleIndex_Lookup) }
