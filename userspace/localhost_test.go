package userspace

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
)

// freeLoopbackPort returns a TCP port nothing listens on at 127.0.0.1 now: a
// node port for the localhost listeners.
func freeLoopbackPort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// TestLocalhostNodePortListeners: in LocalhostNodePorts mode the Proxier keeps
// one listener per TCP node port on the loopback address, and only while the
// node port has an endpoint its external traffic may go to (kube-proxy's
// SyncNodePorts): the set of listeners follows each Sync.
func TestLocalhostNodePortListeners(t *testing.T) {
	here := startTCPBackend(t, direct, "here", "127.0.0.1:0", sayName)
	there := startTCPBackend(t, direct, "there", "127.0.0.1:0", sayName)
	np := freeLoopbackPort(t)
	web := func(externalLocal bool, eps ...*backend) svcSpec {
		s := svcSpec{name: "default/web", port: "http", clusterIP: "198.18.0.10", svcPort: 80, nodePort: np, externalLocal: externalLocal}
		for _, b := range eps {
			s.endpoints = append(s.endpoints, b.addr.String()+"@node-"+b.name)
		}
		return s
	}
	p := startProxier(t, Config{BindAddress: netip.MustParseAddr("127.0.0.1"), LocalhostNodePorts: true, Node: dataplane.Node{NodeName: "node-here"}})
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), np).String()
	steps := []struct {
		name   string
		spec   svcSpec
		want   map[string]int // answers of 4 connections; nil: refused
		status PortStatus     // Listener and NodePort
	}{
		{"policy Cluster: every endpoint", web(false, here, there), map[string]int{"here": 2, "there": 2}, PortStatus{NodePort: np}},
		{"no endpoint: no listener", web(false), nil, PortStatus{}},
		{"policy Local with a local endpoint: only it, although the client is the node", web(true, here, there), map[string]int{"here": 4}, PortStatus{NodePort: np}},
		{"policy Local without a local endpoint: refused", web(true, there), nil, PortStatus{}},
		{"back to Cluster", web(false, there), map[string]int{"there": 4}, PortStatus{NodePort: np}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			mustSync(t, p, snapshotOf(t, st.spec))
			ps := portStatus(t, p, "default/web:http")
			if ps.Listener != st.status.Listener || ps.NodePort != st.status.NodePort {
				t.Fatalf("listener %d, node port %d; want %d, %d (a node port listener only, none for the ClusterIP)",
					ps.Listener, ps.NodePort, st.status.Listener, st.status.NodePort)
			}
			if st.want == nil {
				if c, err := net.Dial("tcp4", addr); err == nil {
					c.Close()
					t.Fatalf("%s accepts, want refused", addr)
				}
				return
			}
			got := map[string]int{}
			for range 4 {
				s, err := readAll(t, addr)
				if err != nil {
					t.Fatal(err)
				}
				got[s]++
			}
			for k, n := range st.want {
				if got[k] != n {
					t.Fatalf("answers %v, want %v", got, st.want)
				}
			}
		})
	}
	mustSync(t, p, snapshotOf(t))
	if len(p.Status().Ports) != 0 {
		t.Fatalf("ports after the Service left: %+v", p.Status().Ports)
	}
	if c, err := net.Dial("tcp4", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after the Service left", addr)
	}
}

// TestLocalhostNodePortsServed: only TCP node ports get a localhost listener;
// a UDP one is listed as unserved with the reason, a Service without a node
// port is not served and not listed.
func TestLocalhostNodePortsServed(t *testing.T) {
	be := startUDPBackend(t, direct, "u", "127.0.0.1:0")
	tcp := startTCPBackend(t, direct, "t", "127.0.0.1:0", sayName)
	udp := svcSpec{name: "default/dns", port: "dns", proto: service.UDP, clusterIP: "198.18.0.11", svcPort: 53,
		nodePort: freeLoopbackPort(t), endpoints: []string{be.addr.String()}}
	plain := webSpec(service.Affinity{}, tcp.addr.String())
	p := startProxier(t, Config{BindAddress: netip.MustParseAddr("127.0.0.1"), LocalhostNodePorts: true})
	mustSync(t, p, snapshotOf(t, udp, plain))
	st := p.Status()
	if len(st.Ports) != 0 {
		t.Errorf("served ports %+v, want none", st.Ports)
	}
	if len(st.Unserved) != 1 || st.Unserved[0].Name != "default/dns:dns/UDP" || !strings.Contains(st.Unserved[0].Reason, "TCP only") {
		t.Errorf("unserved %+v, want default/dns:dns/UDP, TCP only", st.Unserved)
	}
}

// TestLocalhostNodePortTaken: a node port another socket holds on loopback is
// skipped with the reason in Status and counted (kube-proxy's listener
// creation failures); the other node ports are served.
func TestLocalhostNodePortTaken(t *testing.T) {
	taken, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", sayName)
	clash := svcSpec{name: "default/clash", port: "http", clusterIP: "198.18.0.12", svcPort: 80,
		nodePort: uint16(taken.Addr().(*net.TCPAddr).Port), endpoints: []string{be.addr.String()}}
	web := clash
	web.name, web.clusterIP, web.nodePort = "default/web", "198.18.0.10", freeLoopbackPort(t)
	p := startProxier(t, Config{BindAddress: netip.MustParseAddr("127.0.0.1"), LocalhostNodePorts: true})
	if err := p.Sync(snapshotOf(t, clash, web)); err == nil || !strings.Contains(err.Error(), "default/clash:http") {
		t.Fatalf("Sync error %v, want one naming default/clash:http", err)
	}
	if ps := portStatus(t, p, "default/clash:http"); ps.Error == "" || ps.NodePort != 0 {
		t.Errorf("clash status %+v, want an error and no node port", ps)
	}
	if p.ListenFailures() != 1 {
		t.Errorf("ListenFailures = %d, want 1", p.ListenFailures())
	}
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), web.nodePort).String()
	if s, err := readAll(t, addr); err != nil || s != "a" {
		t.Errorf("web's node port: %q, %v; want a", s, err)
	}
}

// TestLocalhostNodePortAffinity: with ClientIP affinity every connection
// through a localhost listener comes from the loopback address, so while the
// affinity holds they all go to one endpoint (kube-proxy's localhost proxy
// pins one endpoint the same way).
func TestLocalhostNodePortAffinity(t *testing.T) {
	a := startTCPBackend(t, direct, "a", "127.0.0.1:0", sayName)
	b := startTCPBackend(t, direct, "b", "127.0.0.1:0", sayName)
	spec := webSpec(service.Affinity{ClientIP: true, Timeout: time.Hour}, a.addr.String(), b.addr.String())
	spec.nodePort = freeLoopbackPort(t)
	p := startProxier(t, Config{BindAddress: netip.MustParseAddr("127.0.0.1"), LocalhostNodePorts: true})
	mustSync(t, p, snapshotOf(t, spec))
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), spec.nodePort).String()
	got := map[string]int{}
	for range 6 {
		s, err := readAll(t, addr)
		if err != nil {
			t.Fatal(err)
		}
		got[s]++
	}
	if len(got) != 1 {
		t.Fatalf("answers %v, want all 6 from one endpoint", got)
	}
}
