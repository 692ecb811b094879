package socklb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	offloadnftables "github.com/svcproxy/svcproxy/offload/nftables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"

	"sigs.k8s.io/knftables"
)

var (
	nodeIP    = netip.MustParseAddr("198.19.0.1")
	podIP     = netip.MustParseAddr("198.19.1.50")  // a client pod on this node
	outsideIP = netip.MustParseAddr("198.19.200.7") // a client outside the cluster
)

// fakeMode is --mode socklb over Fakes: the hooks' maps in a socklb Fake,
// the nftables table beside them in a nftables Fake.
type fakeMode struct {
	dp  *Dataplane
	lb  *ksocklb.Fake
	nft *knft.Fake
}

func newFakeMode(t *testing.T, snap *service.Snapshot) *fakeMode {
	return newFakeModeCounting(t, snap, false)
}

// newFakeModeCounting is newFakeMode with the nftables path's per-port
// connection counters (hybrid's CountConnections) when count is set.
func newFakeModeCounting(t *testing.T, snap *service.Snapshot, count bool) *fakeMode {
	t.Helper()
	return newFakeModeWith(t, snap, count, func(lb *ksocklb.Fake) ksocklb.Interface { return lb })
}

// newFakeModeWith is newFakeModeCounting with the Dataplane's LB made from
// the socklb Fake by wrap (to hide its counters, say).
func newFakeModeWith(t *testing.T, snap *service.Snapshot, count bool, wrap func(*ksocklb.Fake) ksocklb.Interface) *fakeMode {
	t.Helper()
	m := &fakeMode{lb: ksocklb.NewFake(), nft: knft.NewFake(offloadnftables.Table)}
	m.nft.SetLocalAddrs(nodeIP)
	beside, err := offloadnftables.New(offloadnftables.Config{Node: dataplane.Node{NodeName: st.ThisNode, ClusterCIDR: netip.MustParsePrefix("198.19.1.0/24")}, CountConnections: count, NFT: countersFake{m.nft}})
	if err != nil {
		t.Fatal(err)
	}
	m.dp, err = New(Config{LB: wrap(m.lb), Node: dataplane.Node{NodeName: st.ThisNode}, Beside: beside})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.dp.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	return m
}

// path follows a new TCP connection: a socket in the cgroup meets the
// connect hook first (inCgroup), then its first packet meets the nftables
// table, from this host (local) or arriving from src. It returns both
// decisions on one line: "socket -> 198.19.1.10:8080, packet ACCEPT".
func (m *fakeMode) path(t *testing.T, inCgroup, local bool, src netip.Addr, dst string) string {
	t.Helper()
	to := netip.MustParseAddrPort(dst)
	var out []string
	if inCgroup {
		got, tr := m.lb.Connect(ksocklb.Client{NetnsCookie: 1, Random: 0}, ksocklb.TCP, to)
		t.Logf("connect():\n%s", tr)
		if tr.Translated() {
			out = append(out, "socket -> "+got.String())
		} else {
			out = append(out, "socket untouched")
		}
		to = got
	}
	tr, err := m.nft.Trace(knft.Packet{Src: src, Dst: to, Local: local})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first packet:\n%s", tr)
	return strings.Join(append(out, "packet "+tr.Result()), ", ")
}

// TestDataplanePaths: which path carries which connection in --mode socklb.
// A socket in the cgroup connecting to a ClusterIP is connected to a pod and
// its packets are plain (nftables lets them pass, no DNAT); everything the
// hook does not see or leaves alone is DNATed or rejected by nftables, as in
// nftables mode.
func TestDataplanePaths(t *testing.T) {
	m := newFakeMode(t, st.Snapshot(
		st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints(), st.WithNodePort(30080), st.WithExternalIPs("198.18.100.1")),
		st.Service("empty", "198.18.0.20", 80, nil),
	))
	tests := []struct {
		name            string
		inCgroup, local bool
		src             netip.Addr
		dst             string
		want            string
	}{
		{"pod in the cgroup to a ClusterIP: connected to the pod, no NAT", true, true, podIP, "198.18.0.10:80",
			"socket -> 198.19.1.10:8080, packet ACCEPT"},
		{"pod in the cgroup to a ClusterIP without endpoints: nftables rejects", true, true, podIP, "198.18.0.20:80",
			"socket untouched, packet REJECT"},
		{"pod in the cgroup to an externalIP: nftables DNATs", true, true, podIP, "198.18.100.1:80",
			"socket untouched, packet DNAT 198.19.1.10:8080, MASQUERADE"},
		{"process outside the cgroup to a ClusterIP: nftables DNATs", false, true, nodeIP, "198.18.0.10:80",
			"packet DNAT 198.19.1.10:8080, MASQUERADE"},
		{"forwarded from another host to a ClusterIP: nftables DNATs", false, false, outsideIP, "198.18.0.10:80",
			"packet DNAT 198.19.1.10:8080, MASQUERADE"},
		{"from outside to a NodePort: nftables DNATs", false, false, outsideIP, "198.19.0.1:30080",
			"packet DNAT 198.19.1.10:8080, MASQUERADE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := m.path(t, tt.inCgroup, tt.local, tt.src, tt.dst); got != tt.want {
				t.Errorf("%s\n  got  %s\n  want %s", tt.dst, got, tt.want)
			}
		})
	}
}

// TestDataplaneStatusAndMetrics: /status shows each port on path "socklb"
// with the table beside, and the connect()s the hooks translated to it;
// /metrics has the maps' sync record, each port's backends and translations
// beside nftables mode's own metrics.
func TestDataplaneStatusAndMetrics(t *testing.T) {
	m := newFakeMode(t, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints())))
	for i := range 4 {
		m.lb.Connect(ksocklb.Client{SocketCookie: uint64(i)}, ksocklb.TCP, netip.MustParseAddrPort("198.18.0.10:80"))
	}
	b, err := json.Marshal(m.dp.Status())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"mode":"socklb"`, `"path":"socklb"`, `"frontends":["198.18.0.10:80"]`, `"nftables":{`,
		`"connections":{"default/web:p":4}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/status lacks %s:\n%s", want, b)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.dp)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{} // metric name and labels -> value
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			key := f.GetName()
			for _, l := range mt.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			got[key] = fmt.Sprint(mt.GetGauge().GetValue() + mt.GetCounter().GetValue())
		}
	}
	for key, want := range map[string]string{
		"svcproxy_socklb_port_backends service_port=default/web:p":          "3",
		"svcproxy_socklb_port_connections_total service_port=default/web:p": "4",
		"svcproxy_socklb_services":                                          "1",
		"svcproxy_socklb_element_updates_total op=set":                      "1",
		"svcproxy_socklb_syncs_total result=ok":                             "1",
		"svcproxy_nftables_syncs_total kind=full":                           "1",
	} {
		if got[key] != want {
			t.Errorf("/metrics: %s is %q, want %s", key, got[key], want)
		}
	}
}

func TestDataplaneNeedsBeside(t *testing.T) {
	if _, err := New(Config{LB: ksocklb.NewFake()}); err == nil || !strings.Contains(err.Error(), "Beside") {
		t.Errorf("New without a path beside: %v, want an error naming Beside", err)
	}
}

// TestDataplaneConnectionsWithoutCounter: a kernel side that does not count
// its translations leaves the maps' ports out of Connections, rather than
// answer with the nftables path's count alone (a busy port would look quiet
// and hybrid would demote it).
func TestDataplaneConnectionsWithoutCounter(t *testing.T) {
	snap := st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()),
		st.Service("sctp", "198.18.0.30", 80, st.ThreeEndpoints(), st.WithProtocol(service.SCTP)))
	m := newFakeModeWith(t, snap, true, func(lb *ksocklb.Fake) ksocklb.Interface { return notCounting{lb} })
	ports := map[service.PortName]bool{snap.Ports()[0].Name: true, snap.Ports()[1].Name: true}
	got, err := m.dp.Connections(context.Background(), snap, ports)
	if err != nil {
		t.Fatal(err)
	}
	for name, n := range got {
		if name.Name == "web" {
			t.Errorf("Connections has web (%d), which the maps carry and nobody counts: want it left out", n)
		}
	}
	sctp, _ := snap.Port(service.PortName{NamespacedName: service.NamespacedName{Namespace: "default", Name: "sctp"}, Port: "p", Protocol: service.SCTP})
	if _, ok := got[sctp.Name]; !ok {
		t.Errorf("Connections lacks the SCTP port, which only the nftables path carries and counts: %v", got)
	}
}

// notCounting is a kernel side without Counter: the Fake's Interface
// methods, not its Connections.
type notCounting struct{ ksocklb.Interface }

// TestDataplaneConnectionsCounted: with a kernel side that counts (the
// Fake, as Kernel), a port's connections are the hooks' translations to its
// ClusterIPs plus the path beside's count (the nftables Fake's counters stay
// 0: its tracer does not count): 5 connects from the cgroup make 5, where
// without the counter the port would be left out.
func TestDataplaneConnectionsCounted(t *testing.T) {
	snap := st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()))
	m := newFakeModeCounting(t, snap, true)
	web := snap.Ports()[0].Name
	for i := range 5 {
		m.lb.Connect(ksocklb.Client{SocketCookie: uint64(i)}, ksocklb.TCP, netip.MustParseAddrPort("198.18.0.10:80"))
	}
	got, err := m.dp.Connections(context.Background(), snap, map[service.PortName]bool{web: true})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := got[web]; !ok || n != 5 {
		t.Errorf("Connections()[web] = %d (present: %v), want the 5 the hooks translated", n, ok)
	}
}

// countersFake is the nftables Fake with knftables' Fake.ListCounters
// mended: it makes its slice with a length and appends after it, so the
// answer starts with a nil per counter (sigs.k8s.io/knftables fake.go).
type countersFake struct{ *knft.Fake }

func (f countersFake) ListCounters(ctx context.Context) ([]*knftables.Counter, error) {
	all, err := f.Fake.ListCounters(ctx)
	var out []*knftables.Counter
	for _, c := range all {
		if c != nil {
			out = append(out, c)
		}
	}
	return out, err
}
