package nftables

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// Real-kernel tests: the table applied with nft in a node namespace, real sockets
// in client and backend namespaces. They need root and nft.

// The checks every kernel mode shares (internal/offloadtest), on this mode.

func TestKernelSpread(t *testing.T) {
	l := newLab(t)
	l.CheckSpread(t, l.syncer(t, l.dataplane(t)))
}

// TestKernelTopology: trafficDistribution through the endpoints' hints
// (service.Port.Categorize): PreferSameNode, PreferSameZone, and a node
// without a zone label.
func TestKernelTopology(t *testing.T) {
	l := newLab(t)
	l.CheckTopology(t, l.syncer(t, l.dataplane(t)))
}

func TestKernelAffinity(t *testing.T) {
	l := newLab(t)
	l.CheckAffinity(t, l.syncer(t, l.dataplane(t)))
}

func TestKernelNodePort(t *testing.T) {
	l := newLab(t)
	l.CheckNodePort(t, l.syncer(t, l.dataplane(t)))
}

func TestKernelUDPConntrack(t *testing.T) {
	l := newLab(t)
	netnstestRequireConntrack(t)
	l.CheckUDPConntrack(t, l.syncer(t, l.dataplane(t)), service.IPv4)
}

// Hairpin: a backend that reaches its own Service and lands on itself must see
// the node as the client (the hairpin set masquerades it after DNAT), or it
// would answer itself and the connection would fail; when it lands on another
// backend, that one sees its address: only hairpin traffic is masqueraded.
func TestKernelHairpin(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	l.sync(t, l.dataplane(t), l.Web())
	answers, err := offloadtest.Dial(l.Backends[0], "198.18.0.10:80", 30)
	if err != nil {
		t.Fatal(err)
	}
	self := 0
	for _, a := range answers {
		want := offloadtest.BackendAddr(0).String()
		if a.Backend == "b0" {
			want, self = "198.19.11.1", self+1 // the node's address on b0's link
		}
		if a.Client != want {
			t.Errorf("backend %s saw client %s, want %s", a.Backend, a.Client, want)
		}
	}
	// Each connection lands on b0 with probability 1/3: none in 30 has
	// probability ~5e-6.
	if self == 0 {
		t.Errorf("no connection of 30 landed on b0 itself: %v", answers)
	}
}

// externalIPs and LoadBalancer IPs: reached from the client through the node;
// loadBalancerSourceRanges drop what comes from elsewhere, and an ingress IP with
// ipMode Proxy is not captured at all.
func TestKernelExternalAndLoadBalancer(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	p := l.dataplane(t)
	lb := func(ranges ...string) *service.Snapshot {
		obj := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: v1.ServiceSpec{
				Type: v1.ServiceTypeLoadBalancer, ClusterIP: "198.18.0.10", ExternalIPs: []string{"198.18.100.1"},
				Ports:                    []v1.ServicePort{{Name: "p", Port: 80, NodePort: 30080}},
				LoadBalancerSourceRanges: ranges,
			},
			Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{
				{IP: "198.18.200.1"}, {IP: "198.18.200.2", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)},
			}}},
		}
		var eps []discoveryv1.Endpoint
		for _, e := range l.Endpoints(8080) {
			eps = append(eps, discoveryv1.Endpoint{Addresses: []string{e.Addr.Addr().String()}, NodeName: ptr.To(st.ThisNode)})
		}
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("p"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
			Endpoints:   eps,
		}
		snap := service.Build([]*v1.Service{obj}, []*discoveryv1.EndpointSlice{es}, nil)
		if errs := snap.Errors(); len(errs) > 0 {
			t.Fatal(errs)
		}
		return snap
	}
	l.sync(t, p, lb("198.19.10.0/24"))
	for _, dst := range []string{"198.18.100.1:80", "198.18.200.1:80"} {
		if _, err := offloadtest.Dial(l.Client, dst, 3); err != nil {
			t.Errorf("%s from inside the source ranges: %v", dst, err)
		}
	}
	if _, err := dialOnce(l.Client, "198.18.200.2:80"); err == nil {
		t.Error("198.18.200.2 has ipMode Proxy: the node must not DNAT it, yet a backend answered")
	}
	l.sync(t, p, lb("203.0.113.0/24"))
	if _, err := dialOnce(l.Client, "198.18.200.1:80"); err == nil {
		t.Error("from outside the source ranges: a backend answered, want the SYN dropped")
	}
	if _, err := offloadtest.Dial(l.Client, "198.18.100.1:80", 1); err != nil {
		t.Errorf("the external IP is not subject to the LoadBalancer's source ranges: %v", err)
	}
}

// dialOnce makes one connection with a short timeout: for destinations that must
// not answer (a dropped SYN never does).
func dialOnce(ns interface{ Do(func() error) error }, dst string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", dst, time.Second)
		return err
	})
	if c != nil {
		c.Close()
	}
	return c, err
}

// The node itself reaches a ClusterIP (output), a port without endpoints and a
// ClusterIP's port that no Service has are refused at once.
func TestKernelLocalAndReject(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	l.sync(t, l.dataplane(t), st.Snapshot(
		st.Service("web", "198.18.0.10", 80, l.Endpoints(8080)),
		st.Service("empty", "198.18.0.20", 80, nil),
	))
	if _, err := offloadtest.Dial(l.Node, "198.18.0.10:80", 3); err != nil {
		t.Errorf("from the node: %v", err)
	}
	for _, tc := range []struct{ name, ns, dst string }{
		{"client, no endpoints", "client", "198.18.0.20:80"},
		{"node, no endpoints", "node", "198.18.0.20:80"},
		{"client, no such port", "client", "198.18.0.10:81"},
		{"node, no such port", "node", "198.18.0.10:81"},
	} {
		ns := l.Client
		if tc.ns == "node" {
			ns = l.Node
		}
		if _, err := offloadtest.Dial(ns, tc.dst, 1); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: %v, want connection refused (REJECT)\n%s", tc.name, err, l.Node.Run(t, "nft", "list", "table", "ip", Table))
		}
	}
}

// A partial sync writes only the changed port's objects; the others keep working.
func TestKernelPartialSync(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	p := l.dataplane(t)
	many := func(webEndpoints []service.Endpoint) *service.Snapshot {
		svcs := []*service.Service{st.Service("web", "198.18.0.10", 80, webEndpoints)}
		for i := range 50 {
			ip := "198.18.1." + itoa(i+1)
			svcs = append(svcs, st.Service("other-"+itoa(i), ip, 80, l.Endpoints(8080)))
		}
		return st.Snapshot(svcs...)
	}
	l.sync(t, p, many(l.Endpoints(8080)))
	full := p.Health().Operations
	l.sync(t, p, many(l.Endpoints(8080)[:1]))
	h := p.Health()
	if h.PartialSyncs != 1 || h.Operations*10 > full {
		t.Errorf("one service changed: %d operations (full sync: %d), health %+v: want a small partial sync", h.Operations, full, h)
	}
	answers, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range answers {
		if a.Backend != "b0" {
			t.Errorf("after the change web has one endpoint, b0; %s answered", a.Backend)
		}
	}
	if _, err := offloadtest.Dial(l.Client, "198.18.1.50:80", 3); err != nil {
		t.Errorf("an unchanged service: %v", err)
	}
	// The removed endpoints' chains are emptied, and nothing leads to them; the
	// next full sync deletes them (see partialTx).
	table := l.Node.Run(t, "nft", "list", "table", "ip", Table)
	for _, gone := range []string{"default/web/tcp/p__198.19.12.2/8080", "default/web/tcp/p__198.19.13.2/8080"} {
		requireInert(t, table, gone)
	}
}

// requireInert fails unless every line of the table listing that names marker
// declares an object (a chain, set or counter) that nothing else names, and each
// such chain is empty: what a partial sync leaves for the next full sync to delete.
func requireInert(t *testing.T, table, marker string) {
	t.Helper()
	lines := strings.Split(table, "\n")
	for i, l := range lines {
		if !strings.Contains(l, marker) {
			continue
		}
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "chain" && f[2] == "{" && i+1 < len(lines) && strings.TrimSpace(lines[i+1]) == "}":
		case len(f) == 3 && (f[0] == "set" || f[0] == "counter") && f[2] == "{":
		default:
			t.Errorf("%s is still in use: %q\n%s", marker, l, table)
		}
	}
}

// The table outlives the Dataplane; a new one adopts it without a gap, and Cleanup
// deletes it.
func TestKernelRestartAndCleanup(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	l.sync(t, l.dataplane(t), l.Web())
	ctx, cancel := context.WithCancel(context.Background())
	var ok, failed atomic.Int64
	done := make(chan struct{})
	go func() { // owned by this test, stopped by cancel
		defer close(done)
		for ctx.Err() == nil {
			if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 1); err != nil {
				failed.Add(1)
				t.Logf("during restart: %v", err)
			} else {
				ok.Add(1)
			}
		}
	}()
	for ok.Load() < 5 {
		time.Sleep(10 * time.Millisecond) // waits for traffic to flow, asserts nothing about time
	}
	restarted := l.dataplane(t)
	for range 3 {
		l.sync(t, restarted, l.Web(st.WithNodePort(30080)))
	}
	for n := ok.Load(); ok.Load() < n+5; {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if failed.Load() > 0 {
		t.Errorf("%d of %d connections failed during the restart", failed.Load(), ok.Load()+failed.Load())
	}
	if h := restarted.Health(); h.FullSyncs != 1 || h.PartialSyncs != 2 {
		t.Errorf("restarted dataplane: %+v, want one full sync then partial ones", h)
	}

	nft := l.nft(t)
	for range 2 { // twice: the second finds nothing, and that is fine
		if err := l.Node.Do(func() error { return Cleanup(context.Background(), nft) }); err != nil {
			t.Fatal(err)
		}
	}
	if out := l.Node.Run(t, "nft", "list", "tables"); strings.Contains(out, Table) {
		t.Errorf("after Cleanup: %s", out)
	}
	if _, err := dialOnce(l.Client, "198.18.0.10:80"); err == nil {
		t.Error("the ClusterIP still answers after Cleanup")
	}
}

// Chains and sets that belong to nothing any more: a partial sync empties them and
// drops every reference to them (from what it applied); a full sync deletes them
// (from what it finds in the kernel's table), also those an earlier process left.
func TestKernelStaleChains(t *testing.T) {
	l := newLab(t)
	two := st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(8080), st.WithNodePort(30080)),
		st.Service("api", "198.18.0.20", 80, l.Endpoints(8080), st.WithAffinity(time.Minute)))
	p := l.dataplane(t)
	l.sync(t, p, two)
	l.sync(t, p, l.Web()) // partial: api goes, web loses its NodePort
	table := l.Node.Run(t, "nft", "list", "table", "ip", Table)
	requireInert(t, table, "default/api") // emptied by the partial sync
	requireInert(t, table, prefixExternal)
	l.sync(t, l.dataplane(t), l.Web()) // restarted: a full sync deletes them
	table = l.Node.Run(t, "nft", "list", "table", "ip", Table)
	if strings.Contains(table, "default/api") || strings.Contains(table, prefixExternal) {
		t.Errorf("after a full sync, stale objects are left:\n%s", table)
	}
	l.sync(t, l.dataplane(t), two)           // restarted with both
	l.sync(t, l.dataplane(t), st.Snapshot()) // restarted with none: a full sync reads what is there
	table = l.Node.Run(t, "nft", "list", "table", "ip", Table)
	for _, prefix := range append(portChainPrefixes, prefixAffinity) {
		if regexp.MustCompile(prefix + `[A-Z2-7]{8}-`).MatchString(table) {
			t.Errorf("after a full sync of nothing, %s objects are left:\n%s", prefix, table)
		}
	}
}

// Hybrid mode samples each promoted port's new connections from its named counter,
// which survives rewrites of the port's chains.
func TestKernelConnections(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	l.cfg.CountConnections = true
	p := l.dataplane(t)
	l.sync(t, p, l.Web())
	count := func() uint64 {
		t.Helper()
		var got map[service.PortName]uint64
		if err := l.Node.Do(func() (err error) {
			got, err = p.Connections(context.Background(), nil, map[service.PortName]bool{labPort: true})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return got[labPort]
	}
	if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 5); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 5 {
		t.Errorf("after 5 connections: %d", n)
	}
	l.sync(t, p, st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(8080)[:2]))) // the port's chains are rewritten
	if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 3); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 8 {
		t.Errorf("after a rewrite and 3 more connections: %d, want 8", n)
	}
}

// A new process's first sync deletes the UDP entries that an earlier one
// left pointing at no endpoint (kube-proxy's conntrack reconciliation).
func TestKernelFirstSyncUDPConntrack(t *testing.T) {
	l := newLab(t)
	netnstestRequireConntrack(t)
	l.FirstSyncMovesUDP(t, func(eps []service.Endpoint) kernelsync.Health {
		p := l.dataplane(t)
		l.sync(t, p, st.Snapshot(st.Service("dns", "198.18.0.53", 53, eps, st.WithProtocol(service.UDP))))
		return p.Health().Health
	})
}

// A one-way UDP sender to a Service whose endpoints go to zero is refused,
// not left on its conntrack entry to the old endpoint (kubernetes#139629).
func TestKernelUDPOneWayToZero(t *testing.T) {
	l := newLab(t)
	netnstestRequireConntrack(t)
	l.CheckUDPOneWayToZero(t, func() offloadtest.Sync { return l.syncer(t, l.dataplane(t)) }, service.IPv4)
}
