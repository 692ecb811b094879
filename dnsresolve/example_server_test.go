package dnsresolve_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/dnsresolve"
	"github.com/svcproxy/svcproxy/internal/exampletest"
	"github.com/svcproxy/svcproxy/service/watch"
)

// labCluster is part of the lab's cluster (lab/cluster/manifests.yaml): web with a
// ClusterIP and a named port, db headless with two named pods, and frontend,
// an ExternalName alias of web.
const labCluster = `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 198.18.0.20
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  ports: [{name: postgres, port: 5432}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-1, labels: {kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{name: postgres, port: 5432}]
endpoints:
- {addresses: [198.19.1.20], hostname: db-0}
- {addresses: [198.19.1.21], hostname: db-1}
---
apiVersion: v1
kind: Service
metadata: {name: frontend}
spec: {type: ExternalName, externalName: web.default.svc.cluster.local}
`

// serveLab starts a Server for labCluster on a loopback port, as clusterdns
// runs it, and returns its address and a function that stops it.
func serveLab() (addr string, stop func()) {
	snap, err := watch.SnapshotOf("services.yaml", []byte(labCluster))
	if err != nil {
		panic(err)
	}
	srv, err := dnsresolve.New(dnsresolve.Config{TTL: 5}) // no upstreams: names outside the zone are REFUSED
	if err != nil {
		panic(err)
	}
	srv.Update(snap)
	// The sockets are bound before Serve starts: a query sent at once waits
	// in the socket's queue, so there is nothing to wait for.
	pc, ln, err := dnsresolve.Listen("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, pc, ln) }()
	return pc.LocalAddr().String(), func() { cancel(); <-done }
}

// ask sends one question over UDP, as `dig +noall +answer` does, and prints
// the answer's code and records.
func ask(addr, name string, qtype uint16) {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	r, _, err := new(dns.Client).Exchange(q, addr)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %s: %s\n", dns.TypeToString[qtype], name, dns.RcodeToString[r.Rcode])
	for _, rr := range r.Answer {
		fmt.Println(" ", strings.ReplaceAll(rr.String(), "\t", " "))
	}
}

// The Server is what clusterdns runs: the miekg/dns server on a UDP and a TCP
// socket, answering from the Index of the latest Snapshot. Each Service kind
// has its records: A and SRV for a ClusterIP Service, one A per pod and an SRV
// per named pod for a headless one, PTR back from every address, a CNAME for
// an ExternalName (followed, since its target is in the cluster).
func ExampleServer() {
	addr, stop := serveLab()
	defer stop()

	ask(addr, "web.default.svc.cluster.local.", dns.TypeA)
	ask(addr, "_http._tcp.web.default.svc.cluster.local.", dns.TypeSRV)
	ask(addr, "20.0.18.198.in-addr.arpa.", dns.TypePTR)
	ask(addr, "db.default.svc.cluster.local.", dns.TypeA)
	ask(addr, "_postgres._tcp.db.default.svc.cluster.local.", dns.TypeSRV)
	ask(addr, "21.1.19.198.in-addr.arpa.", dns.TypePTR)
	ask(addr, "frontend.default.svc.cluster.local.", dns.TypeA)
	ask(addr, "nothing.default.svc.cluster.local.", dns.TypeA)
	// Output:
	// A web.default.svc.cluster.local.: NOERROR
	//   web.default.svc.cluster.local. 5 IN A 198.18.0.20
	// SRV _http._tcp.web.default.svc.cluster.local.: NOERROR
	//   _http._tcp.web.default.svc.cluster.local. 5 IN SRV 0 100 80 web.default.svc.cluster.local.
	// PTR 20.0.18.198.in-addr.arpa.: NOERROR
	//   20.0.18.198.in-addr.arpa. 5 IN PTR web.default.svc.cluster.local.
	// A db.default.svc.cluster.local.: NOERROR
	//   db.default.svc.cluster.local. 5 IN A 198.19.1.20
	//   db.default.svc.cluster.local. 5 IN A 198.19.1.21
	// SRV _postgres._tcp.db.default.svc.cluster.local.: NOERROR
	//   _postgres._tcp.db.default.svc.cluster.local. 5 IN SRV 0 50 5432 db-0.db.default.svc.cluster.local.
	//   _postgres._tcp.db.default.svc.cluster.local. 5 IN SRV 0 50 5432 db-1.db.default.svc.cluster.local.
	// PTR 21.1.19.198.in-addr.arpa.: NOERROR
	//   21.1.19.198.in-addr.arpa. 5 IN PTR db-1.db.default.svc.cluster.local.
	// A frontend.default.svc.cluster.local.: NOERROR
	//   frontend.default.svc.cluster.local. 5 IN CNAME web.default.svc.cluster.local.
	//   web.default.svc.cluster.local. 5 IN A 198.18.0.20
	// A nothing.default.svc.cluster.local.: NXDOMAIN
}

// A pod's resolver (the C library, with the resolv.conf the kubelet writes)
// tries a name with fewer than ndots:5 dots with each search domain first,
// and stops at the first answer that is not NXDOMAIN. Each try is one
// question to the cluster DNS: a complete name without its final dot costs
// four, with the dot one.
func ExampleServer_ndots() {
	addr, stop := serveLab()
	defer stop()

	search := []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"}
	const ndots = 5
	resolve := func(name string) {
		typed, tries := name, []string(nil)
		if !strings.HasSuffix(name, ".") {
			if strings.Count(name, ".") < ndots {
				for _, d := range search {
					tries = append(tries, name+"."+d+".")
				}
			}
			name += "." // then as it is (first, with ndots dots or more)
		}
		tries = append(tries, name)
		fmt.Printf("%s:\n", typed)
		for i, t := range tries {
			q := new(dns.Msg)
			q.SetQuestion(t, dns.TypeA)
			r, _, err := new(dns.Client).Exchange(q, addr)
			if err != nil {
				panic(err)
			}
			fmt.Printf("  %d. %s %s\n", i+1, t, dns.RcodeToString[r.Rcode])
			if r.Rcode != dns.RcodeNameError {
				return
			}
		}
	}
	resolve("web")
	resolve("web.default")
	resolve("web.default.svc.cluster.local")
	resolve("web.default.svc.cluster.local.")
	// Output:
	// web:
	//   1. web.default.svc.cluster.local. NOERROR
	// web.default:
	//   1. web.default.default.svc.cluster.local. NXDOMAIN
	//   2. web.default.svc.cluster.local. NOERROR
	// web.default.svc.cluster.local:
	//   1. web.default.svc.cluster.local.default.svc.cluster.local. NXDOMAIN
	//   2. web.default.svc.cluster.local.svc.cluster.local. NXDOMAIN
	//   3. web.default.svc.cluster.local.cluster.local. NXDOMAIN
	//   4. web.default.svc.cluster.local. NOERROR
	// web.default.svc.cluster.local.:
	//   1. web.default.svc.cluster.local. NOERROR
}

// TestExampleServer logs what ExampleServer prints: go test -v shows a test's log, never an
// Example's output (internal/exampletest).
func TestExampleServer(t *testing.T) { exampletest.Log(t, ExampleServer) }

// TestExampleServer_ndots logs what ExampleServer_ndots prints: go test -v shows a test's log, never an
// Example's output (internal/exampletest).
func TestExampleServer_ndots(t *testing.T) { exampletest.Log(t, ExampleServer_ndots) }
