package dnsresolve

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/service/watch"
)

// This file ports the rows of CoreDNS v1.14.6's own kubernetes-plugin tests
// (github.com/coredns/coredns, plugin/kubernetes) for the options kubeadm's
// Corefile uses: pods (handler_pod_insecure_test.go, handler_pod_disabled_test.go,
// handler_pod_verified_test.go), reverse zones (reverse_test.go, TestReverse)
// and ttl. Their fixtures, Go values of CoreDNS's fake API connection
// (APIConnServeTest, APIConnReverseTest), are written here as the manifests
// a cluster would hold; each row is CoreDNS's, in zone-file syntax. CoreDNS's
// rows compare the SOA's name server only; these compare the whole record
// but its serial.

// coreDNSServe is APIConnServeTest as manifests: the namespaces that exist
// (every one but pod-nons, the one CoreDNS's fake says does not), and the one
// pod its PodIndex knows, 10.240.0.1 in podns.
const coreDNSServe = `
apiVersion: v1
kind: Namespace
metadata: {name: testns}
---
apiVersion: v1
kind: Namespace
metadata: {name: podns}
---
apiVersion: v1
kind: Namespace
metadata: {name: svcns}
---
apiVersion: v1
kind: Pod
metadata: {name: pod-1, namespace: podns}
spec: {containers: [{name: c, image: i}]}
status: {phase: Running, podIP: 10.240.0.1}
---
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: testns}
spec:
  clusterIP: 10.0.0.1
  ports: [{name: http, port: 80, protocol: TCP}]
`

// coreDNSReverse is APIConnReverseTest as manifests: svc1 with its ClusterIP
// and three EndpointSlices (the third repeats an address of the first, as
// EndpointSlice skew does), and svc2, whose one endpoint svc1 selects too.
// CoreDNS's fake has no Service object for svc2 (its reverse lookup reads
// endpoints only); here it is a ClusterIP Service whose address no row asks.
const coreDNSReverse = `
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: testns}
spec:
  clusterIP: 192.168.1.100
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-slice1, namespace: testns, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
ports: [{name: http, port: 80, protocol: TCP}]
endpoints:
- {addresses: [10.0.0.100], hostname: ep1a}
- {addresses: [10.0.0.99], hostname: double-ep}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-slice2, namespace: testns, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv6
ports: [{name: http, port: 80, protocol: TCP}]
endpoints:
- {addresses: ["1234:abcd::1"], hostname: ep1b}
- {addresses: ["fd00:77:30::a"], hostname: ip6svc1ex}
- {addresses: ["fd00:77:30::2:9ba6"], hostname: ip6svc1in}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-ccccc, namespace: testns, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
ports: [{name: http, port: 80, protocol: TCP}]
endpoints:
- {addresses: [10.0.0.100], hostname: ep1a}
---
apiVersion: v1
kind: Service
metadata: {name: svc2, namespace: testns}
spec:
  clusterIP: 192.168.1.102
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc2-slice1, namespace: testns, labels: {kubernetes.io/service-name: svc2}}
addressType: IPv4
ports: [{name: http, port: 80, protocol: TCP}]
endpoints:
- {addresses: [10.0.0.99], hostname: double-ep}
`

// coreDNSCase is one row: a question and the whole expected answer.
type coreDNSCase struct {
	qname  string
	qtype  uint16
	rcode  int
	answer []string
	ns     []string
}

const (
	soaCluster = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 5"
	soa010     = "0.10.in-addr.arpa. 5 IN SOA ns.dns.0.10.in-addr.arpa. hostmaster.0.10.in-addr.arpa. 0 7200 1800 86400 5"
)

// handler_pod_insecure_test.go, podModeInsecureCases.
var coreDNSPodsInsecure = []coreDNSCase{
	{qname: "10-240-0-1.podns.pod.cluster.local.", qtype: dns.TypeA, answer: []string{"10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"}},
	{qname: "172-0-0-2.podns.pod.cluster.local.", qtype: dns.TypeA, answer: []string{"172-0-0-2.podns.pod.cluster.local. 5 IN A 172.0.0.2"}},
	{qname: "blah.podns.pod.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{soaCluster}},
	{qname: "blah.podns.pod.cluster.local.", qtype: dns.TypeAAAA, rcode: dns.RcodeNameError, ns: []string{soaCluster}},
	{qname: "blah.podns.pod.cluster.local.", qtype: dns.TypeHINFO, rcode: dns.RcodeNameError, ns: []string{soaCluster}},
	{qname: "blah.pod-nons.pod.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{soaCluster}},
	{qname: "podns.pod.cluster.local.", qtype: dns.TypeA, ns: []string{soaCluster}},
}

// handler_pod_disabled_test.go, podModeDisabledCases.
var coreDNSPodsDisabled = []coreDNSCase{
	{qname: "10-240-0-1.podns.pod.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{soaCluster}},
	{qname: "172-0-0-2.podns.pod.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{soaCluster}},
}

// handler_pod_verified_test.go, podModeVerifiedCases.
var coreDNSPodsVerified = []coreDNSCase{
	{qname: "10-240-0-1.podns.pod.cluster.local.", qtype: dns.TypeA, answer: []string{"10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"}},
	{qname: "podns.pod.cluster.local.", qtype: dns.TypeA, ns: []string{soaCluster}},
	{qname: "svcns.svc.cluster.local.", qtype: dns.TypeA, ns: []string{soaCluster}},
	{qname: "pod-nons.pod.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{soaCluster}},
	{qname: "172-0-0-2.podns.pod.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{soaCluster}},
}

// reverse_test.go, TestReverse: zones cluster.local, 0.10.in-addr.arpa,
// 168.192.in-addr.arpa and two ip6.arpa zones, no fallthrough.
var coreDNSReverseCases = []coreDNSCase{
	{qname: "100.0.0.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"100.0.0.10.in-addr.arpa. 5 IN PTR ep1a.svc1.testns.svc.cluster.local."}},
	{qname: "100.1.168.192.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"100.1.168.192.in-addr.arpa. 5 IN PTR svc1.testns.svc.cluster.local."}},
	{qname: "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa.", qtype: dns.TypePTR,
		answer: []string{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa. 5 IN PTR ep1b.svc1.testns.svc.cluster.local."}},
	{qname: "a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.0.0.7.7.0.0.0.0.d.f.ip6.arpa.", qtype: dns.TypePTR,
		answer: []string{"a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.0.0.7.7.0.0.0.0.d.f.ip6.arpa. 5 IN PTR ip6svc1ex.svc1.testns.svc.cluster.local."}},
	{qname: "6.a.b.9.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.0.0.7.7.0.0.0.0.d.f.ip6.arpa.", qtype: dns.TypePTR,
		answer: []string{"6.a.b.9.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.0.0.7.7.0.0.0.0.d.f.ip6.arpa. 5 IN PTR ip6svc1in.svc1.testns.svc.cluster.local."}},
	{qname: "101.0.0.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{soa010}},
	{qname: "example.org.cluster.local.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{soaCluster}},
	{qname: "svc1.testns.svc.cluster.local.", qtype: dns.TypePTR, ns: []string{soaCluster}},
	{qname: "svc1.testns.svc.0.10.in-addr.arpa.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{soa010}},
	{qname: "100.0.0.10.cluster.local.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, ns: []string{soaCluster}},
	{qname: "99.0.0.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{
		"99.0.0.10.in-addr.arpa. 5 IN PTR double-ep.svc1.testns.svc.cluster.local.",
		"99.0.0.10.in-addr.arpa. 5 IN PTR double-ep.svc2.testns.svc.cluster.local."}},
}

func TestCoreDNSPodRows(t *testing.T) {
	for _, tt := range []struct {
		mode PodMode
		rows []coreDNSCase
	}{
		{PodsInsecure, coreDNSPodsInsecure},
		{PodsDisabled, coreDNSPodsDisabled},
		{PodsVerified, coreDNSPodsVerified},
	} {
		t.Run(string(tt.mode), func(t *testing.T) {
			s := coreDNSServer(t, coreDNSServe, Config{TTL: 5, Pods: tt.mode})
			checkCoreDNSRows(t, s, tt.rows)
		})
	}
}

func TestCoreDNSReverseRows(t *testing.T) {
	s := coreDNSServer(t, coreDNSReverse, Config{TTL: 5,
		ReverseZones: []string{"0.10.in-addr.arpa.", "168.192.in-addr.arpa.",
			"0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa.",
			"0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.0.0.7.7.0.0.0.0.d.f.ip6.arpa."},
		Fallthrough: []string{},
	})
	checkCoreDNSRows(t, s, coreDNSReverseCases)
}

// TestCoreDNSTTL: the ttl option sets the TTL of every record of the
// Services and pods, and the SOA's minimum (its own TTL at most 300s), as
// setup_ttl_test.go's accepted values do in CoreDNS; dns-version keeps its
// eight hours.
func TestCoreDNSTTL(t *testing.T) {
	for _, ttl := range []uint32{0, 30, 3600} {
		s := coreDNSServer(t, coreDNSServe, Config{TTL: ttl, Pods: PodsInsecure})
		soaTTL := min(ttl, 300)
		soa, _ := dns.NewRR(soaCluster)
		soa.Header().Ttl = soaTTL
		soa.(*dns.SOA).Minttl = ttl
		a, _ := dns.NewRR("svc1.testns.svc.cluster.local. 0 IN A 10.0.0.1")
		a.Header().Ttl = ttl
		pod, _ := dns.NewRR("10-240-0-1.podns.pod.cluster.local. 0 IN A 10.240.0.1")
		pod.Header().Ttl = ttl
		checkCoreDNSRows(t, s, []coreDNSCase{
			{qname: "svc1.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{a.String()}},
			{qname: "10-240-0-1.podns.pod.cluster.local.", qtype: dns.TypeA, answer: []string{pod.String()}},
			{qname: "svc0.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{soa.String()}},
			{qname: "dns-version.cluster.local.", qtype: dns.TypeTXT, answer: []string{`dns-version.cluster.local. 28800 IN TXT "1.1.0"`}},
		})
	}
}

// TestFallthrough: kubeadm's "fallthrough in-addr.arpa ip6.arpa" sends a
// reverse name of no Service to the upstreams, a name of the cluster zone
// never; "fallthrough" alone sends both; none sends neither.
func TestFallthrough(t *testing.T) {
	up := startUpstream(t, func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg).SetReply(req)
		rr, _ := dns.NewRR(req.Question[0].Name + " 60 IN PTR upstream.example.")
		m.Answer = []dns.RR{rr}
		_ = w.WriteMsg(m)
	})
	const noService, clusterName = "1.2.0.192.in-addr.arpa.", "nope.testns.svc.cluster.local."
	for _, tt := range []struct {
		name      string
		fall      []string
		forwarded map[string]bool
	}{
		{"kubeadm's", []string{"in-addr.arpa", "ip6.arpa"}, map[string]bool{noService: true}},
		{"every zone", []string{"."}, map[string]bool{noService: true, clusterName: true}},
		{"none", []string{}, map[string]bool{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := coreDNSServer(t, coreDNSServe, Config{TTL: 5, Fallthrough: tt.fall, Upstreams: []string{up.addr}, CacheSize: -1})
			for _, name := range []string{noService, clusterName} {
				resp := ask(t, s, question(name, dns.TypePTR), true)
				forwarded := resp.Rcode == dns.RcodeSuccess && len(resp.Answer) == 1
				if forwarded != tt.forwarded[name] {
					t.Errorf("%s: rcode %s, %d answers; forwarded %v, want %v", name, dns.RcodeToString[resp.Rcode], len(resp.Answer), forwarded, tt.forwarded[name])
				}
				if !forwarded && resp.Rcode != dns.RcodeNameError {
					t.Errorf("%s: rcode %s, want NXDOMAIN", name, dns.RcodeToString[resp.Rcode])
				}
			}
		})
	}
}

// coreDNSServer is a Server with the Snapshot of manifests indexed.
func coreDNSServer(t *testing.T, manifests string, cfg Config) *Server {
	t.Helper()
	snap, err := watch.DNSSnapshotOf("cluster.yaml", []byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pods == "" {
		cfg.Pods = PodsInsecure
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Update(snap)
	return s
}

func checkCoreDNSRows(t *testing.T, s *Server, rows []coreDNSCase) {
	t.Helper()
	for _, tt := range rows {
		resp := ask(t, s, question(tt.qname, tt.qtype), false)
		if resp.Rcode != tt.rcode {
			t.Errorf("%s %s: rcode %s, want %s", tt.qname, dns.TypeToString[tt.qtype], dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.rcode])
			continue
		}
		for _, rr := range resp.Ns {
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Serial = 0
			}
		}
		assertRRs(t, tt.qname+" answer", resp.Answer, tt.answer)
		assertRRs(t, tt.qname+" authority", resp.Ns, tt.ns)
	}
}
