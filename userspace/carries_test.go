package userspace

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// TestCarries: a port the Proxier no longer carries (promoted to a kernel path
// by hybrid mode) loses its portal at ApplyPortals, keeps its listener, and
// gets the portal back when carried again.
func TestCarries(t *testing.T) {
	ipt := iptables.NewFake()
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", sayName)
	var excluded atomic.Bool
	p := startProxier(t, Config{IPTables: ipt, Carries: func(n service.PortName) bool {
		return !(excluded.Load() && n.String() == "default/web:http")
	}})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
	listener := portStatus(t, p, "default/web:http").Listener
	pod := iptables.Packet{Src: netip.MustParseAddr("198.19.2.2"), Dst: netip.MustParseAddrPort("198.18.0.10:80"), InIface: "eth0"}

	for _, step := range []struct {
		exclude bool
		want    uint16 // REDIRECT port, 0 for none
	}{{true, 0}, {false, listener}} {
		excluded.Store(step.exclude)
		if err := p.ApplyPortals(); err != nil {
			t.Fatalf("ApplyPortals: %v", err)
		}
		tr, err := ipt.Trace(pod)
		if err != nil {
			t.Fatalf("trace: %v", err)
		}
		if tr.Verdict != "ACCEPT" || tr.Redirect != step.want {
			t.Errorf("excluded=%v: got %s :%d, want ACCEPT :%d\n%s", step.exclude, tr.Verdict, tr.Redirect, step.want, tr)
		}
		// The listener stays, so connections the portal brought in finish.
		if got := portStatus(t, p, "default/web:http").Listener; got != listener {
			t.Errorf("excluded=%v: listener %d, want %d", step.exclude, got, listener)
		}
		c, err := net.Dial("tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), listener).String())
		if err != nil {
			t.Fatalf("excluded=%v: dial the listener: %v", step.exclude, err)
		}
		c.Close()
	}
}
