package guest

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/kernel/link"
	"github.com/svcproxy/svcproxy/offload/ipvs"
	"github.com/svcproxy/svcproxy/service"
)

// clock is a settable clock for draining.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// newProxier makes an offload/ipvs Dataplane on the lab's director.
func (l *lab) newProxier(t *testing.T, clk *clock) *ipvs.Dataplane {
	t.Helper()
	p, err := ipvs.New(ipvs.Config{
		IPVS: l.ipvs, Links: l.links, Node: dataplane.Node{NodePortIPs: []netip.Addr{nodeIP}}, Now: clk.Now, GracePeriod: time.Minute,
	})
	must(t, err)
	t.Cleanup(func() { p.Cleanup(context.Background()) })
	return p
}

// webService is default/web: ClusterIP 198.18.0.20:80 and NodePort 30080 over TCP,
// and 53/UDP, with the given backends.
func webService(backends []netip.Addr) *service.Snapshot {
	svc := &service.Service{
		NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"},
		Type:           service.TypeNodePort,
		ClusterIPs:     []netip.Addr{netip.MustParseAddr("198.18.0.20")},
	}
	for _, pp := range []struct {
		name  string
		proto service.Protocol
		port  uint16
		node  uint16
	}{{"http", service.TCP, 80, 30080}, {"dns", service.UDP, 53, 0}} {
		p := &service.Port{
			Name:    service.PortName{NamespacedName: svc.NamespacedName, Port: pp.name, Protocol: pp.proto},
			Service: svc, Port: pp.port, Protocol: pp.proto, NodePort: pp.node,
		}
		for _, ip := range backends {
			p.Endpoints = append(p.Endpoints, service.Endpoint{Addr: netip.AddrPortFrom(ip, backendPort), Ready: true, Serving: true})
		}
		svc.Ports = append(svc.Ports, p)
	}
	return service.NewSnapshot([]*service.Service{svc}, nil)
}

var (
	webVIP  = netip.MustParseAddrPort("198.18.0.20:80")
	webNode = netip.AddrPortFrom(nodeIP, 30080)
	webTCP  = kipvs.Key{Protocol: kipvs.TCP, Addr: webVIP}
	webUDP  = kipvs.Key{Protocol: kipvs.UDP, Addr: netip.MustParseAddrPort("198.18.0.20:53")}
)

// TestOffloadClusterIPAndNodePort: a Snapshot reconciled by offload/ipvs serves the
// ClusterIP and the NodePort, round-robin, exactly.
func TestOffloadClusterIPAndNodePort(t *testing.T) {
	l := newLab(t)
	p := l.newProxier(t, &clock{now: time.Unix(0, 0)})
	ctx := context.Background()
	must(t, p.Sync(ctx, webService(backendIPs)))
	must(t, p.Sync(ctx, webService(backendIPs))) // idempotent

	for _, dst := range []netip.AddrPort{webVIP, webNode} {
		got := l.spread(t, clientIPs[1], dst, 9)
		logSpread(t, "offload rr "+dst.String(), got)
		wantSpread(t, got, 3, 3, 3)
	}
}

// TestOffloadDrain: a removed TCP real server gets weight 0, keeps its open
// connection, takes no new ones, and is deleted when the grace period ends; the UDP
// one is deleted at once.
func TestOffloadDrain(t *testing.T) {
	l := newLab(t)
	clk := &clock{now: time.Unix(0, 0)}
	p := l.newProxier(t, clk)
	ctx := context.Background()
	must(t, p.Sync(ctx, webService(backendIPs)))

	held := l.dial(t, clientIPs[0], webVIP)
	gone := netip.MustParseAddr(held.backend)
	var rest []netip.Addr
	for _, ip := range backendIPs {
		if ip != gone {
			rest = append(rest, ip)
		}
	}
	goneRS := netip.AddrPortFrom(gone, backendPort)
	must(t, p.Sync(ctx, webService(rest)))

	rs, ok := l.realServer(t, webTCP, goneRS)
	if !ok || rs.Weight != 0 || rs.ActiveConns != 1 {
		t.Fatalf("after removal: TCP real server %s = %+v (present %v), want weight 0 with 1 active connection", goneRS, rs, ok)
	}
	if _, ok := l.realServer(t, webUDP, goneRS); ok {
		t.Errorf("after removal: UDP real server %s still there, want deleted at once", goneRS)
	}
	got := l.spread(t, clientIPs[1], webVIP, 6)
	logSpread(t, "drain: new connections with "+gone.String()+" draining", got)
	if got[gone.String()] != 0 || len(got) != 2 {
		t.Errorf("new connections went to %s, want only %v", formatSpread(got), rest)
	}
	held.echo(t) // the open connection still works

	clk.now = clk.now.Add(30 * time.Second) // within the grace period, still connected
	must(t, p.Sync(ctx, webService(rest)))
	if _, ok := l.realServer(t, webTCP, goneRS); !ok {
		t.Fatalf("real server %s deleted while its connection is open, within the grace period", goneRS)
	}
	held.Close()
	clk.now = clk.now.Add(time.Minute) // grace period over (or no connections left)
	must(t, p.Sync(ctx, webService(rest)))
	if rs, ok := l.realServer(t, webTCP, goneRS); ok {
		t.Fatalf("real server %s = %+v still there after the grace period", goneRS, rs)
	}
	if n := p.Draining(); n != 0 {
		t.Errorf("Draining() = %d, want 0", n)
	}
}

// TestOffloadCleanup: Cleanup removes our virtual servers and the dummy interface,
// and leaves a virtual server that is not ours.
func TestOffloadCleanup(t *testing.T) {
	l := newLab(t)
	p := l.newProxier(t, &clock{now: time.Unix(0, 0)})
	ctx := context.Background()
	foreign := kipvs.Key{Protocol: kipvs.TCP, Addr: netip.AddrPortFrom(nodeIP, 80)}
	must(t, l.ipvs.AddVirtualServer(ctx, kipvs.VirtualServer{Key: foreign, Scheduler: "rr"}))
	must(t, p.Sync(ctx, webService(backendIPs)))
	must(t, p.Cleanup(ctx))

	vss, err := l.ipvs.VirtualServers(ctx)
	must(t, err)
	if len(vss) != 1 || vss[0].Key != foreign {
		t.Errorf("after Cleanup: virtual servers %v, want only the foreign %s", vss, foreign)
	}
	if _, err := l.links.Addresses(ctx, ipvs.DefaultInterface); !errors.Is(err, link.ErrNotExist) {
		t.Errorf("after Cleanup: %s: %v, want it gone", ipvs.DefaultInterface, err)
	}
	must(t, p.Cleanup(ctx)) // nothing left is no error
}
