package iptables

import (
	"net/netip"
	"testing"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The health check node port is accepted in filter, before any DROP policy.
func TestTraceHealthCheckAccepted(t *testing.T) {
	f := syncedFake(t, testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1],
		st.WithNodePort(30080), st.WithLoadBalancer("198.18.200.1"), st.WithExternalLocal(), st.WithHealthCheck(32000))))
	tr, err := f.Trace(kiptables.Packet{Src: netip.MustParseAddr("198.19.200.7"), Dst: netip.MustParseAddrPort("198.19.0.1:32000"), InIface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range tr.Steps {
		found = found || (s.Chain == chainExternalServices && s.Note == "ACCEPT")
	}
	if !found || tr.Result() != "ACCEPT" || !tr.Delivered {
		t.Errorf("health check port not accepted by %s:\n%s", chainExternalServices, tr)
	}
}

// The health check node port's rule comes with the Service's first port: when
// that port goes, a partial sync writes it with the port that is first now.
func TestHealthCheckFollowsFirstPort(t *testing.T) {
	web := func(ports ...string) *service.Service {
		s := st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1],
			st.WithNodePort(30080), st.WithLoadBalancer("198.18.200.1"), st.WithExternalLocal(), st.WithHealthCheck(32000))
		q := *s.Ports[0]
		q.Name.Port, q.Port, q.NodePort = "q", 443, 30443
		all := map[string]*service.Port{"p": s.Ports[0], "q": &q}
		s.Ports = nil
		for _, name := range ports {
			s.Ports = append(s.Ports, all[name])
		}
		return s
	}
	f := kiptables.NewFake()
	f.SetLocalAddrs(nodeIP)
	p := newDataplane(t, f, nil)
	for _, ports := range [][]string{{"p", "q"}, {"q"}} {
		mustSync(t, p, st.Snapshot(web(ports...)))
		tr, err := f.Trace(kiptables.Packet{Src: netip.MustParseAddr("198.19.200.7"), Dst: netip.MustParseAddrPort("198.19.0.1:32000"), InIface: "eth0"})
		if err != nil {
			t.Fatal(err)
		}
		accepted := false
		for _, s := range tr.Steps {
			accepted = accepted || (s.Chain == chainExternalServices && s.Note == "ACCEPT")
		}
		if !accepted {
			t.Errorf("ports %v: the health check node port is not accepted by %s:\n%s", ports, chainExternalServices, tr)
		}
	}
	if h := p.Health(); h.PartialSyncs != 1 {
		t.Errorf("health %+v: want the second sync partial", h)
	}
}
