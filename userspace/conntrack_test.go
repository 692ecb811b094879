package userspace

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// A one-way UDP sender (it sends at a steady pace and never reads) to a
// Service whose endpoints go to zero: its session to the old endpoint ends,
// and its next datagrams meet the REJECT of a port without endpoints, as in
// the kernel modes (kubernetes#139629), instead of the listener, which
// would drop them for as long as the sender sends: its portal's conntrack
// entry (a REDIRECT) outlives the portal.
func TestKernelUDPOneWayToZero(t *testing.T) {
	l := newLabWith(t, Config{Conntrack: conntrack.Netlink{}})
	l.sync(t, dns(epA))
	s := offloadtest.StartUDPSender(t, l.client, dnsVIP+":53", 20*time.Millisecond)
	eventually(t, "a session to a", func() bool { return l.p.Stats()[dnsPort].ConnectionsActive == 1 })
	l.sync(t, dns())
	eventually(t, "the session to a ends", func() bool { return l.p.Stats()[dnsPort].ConnectionsActive == 0 })
	select {
	case <-s.Refused():
	case <-time.After(10 * time.Second):
		t.Errorf("the one-way sender was not refused 10s after its Service lost its endpoints (sessions opened: %d)", l.p.Stats()[dnsPort].ConnectionsOpened)
	}
}

// The conntrack part alone, with Fakes: the entries of a UDP port's
// addresses go once when its portal becomes a REJECT (again after it had
// endpoints again), not for a TCP port, not for a port hybrid mode has
// excluded (its kernel path cleans its own), and not while it has endpoints.
func TestClearRejected(t *testing.T) {
	ipt, ct := iptables.NewFake(), conntrack.NewFake()
	var excluded atomic.Bool
	p := startProxier(t, Config{IPTables: ipt, Conntrack: ct, Carries: func(n service.PortName) bool {
		return !(excluded.Load() && n == dnsPort)
	}})
	a := startUDPBackend(t, direct, "a", "127.0.0.1:0").addr.String()
	vip := conntrack.Filter{Protocol: "udp", OrigDst: netip.MustParseAddr("198.18.0.53"), OrigDstPort: 53}
	for i, step := range []struct {
		name    string
		exclude bool
		specs   []svcSpec
		deletes int // in all, after the step
	}{
		{"endpoints", false, []svcSpec{dnsSpec(a), webSpec(service.Affinity{})}, 0},
		{"none", false, []svcSpec{dnsSpec(), webSpec(service.Affinity{})}, 1},
		{"none still", false, []svcSpec{dnsSpec()}, 1},
		{"endpoints again", false, []svcSpec{dnsSpec(a)}, 1},
		{"none again", false, []svcSpec{dnsSpec()}, 2},
		{"endpoints, excluded", true, []svcSpec{dnsSpec(a)}, 2},
		{"none, excluded", true, []svcSpec{dnsSpec()}, 2},
	} {
		excluded.Store(step.exclude)
		mustSync(t, p, snapshotOf(t, step.specs...))
		got := ct.Deletes()
		if len(got) != step.deletes {
			t.Fatalf("step %d (%s): conntrack deletes %v, want %d in all", i, step.name, got, step.deletes)
		}
		for _, f := range got {
			if f != vip {
				t.Errorf("step %d (%s): delete %s, want %s", i, step.name, f, vip)
			}
		}
	}
}
