package guest

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
)

// TestSchedulers checks on the real kernel, with real TCP connections, how each
// scheduler spreads them over three real servers; the spread is logged per scheduler.
func TestSchedulers(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	vip := netip.MustParseAddr("198.18.0.10")
	must(t, l.links.EnsureDummy(ctx, "svcp-test0"))
	must(t, l.links.AddAddress(ctx, "svcp-test0", pfx(vip, 32)))

	// sequential: n connections one after another, each closed before the next.
	// held: one connection per backend, all kept open, so schedulers that count active
	// connections must give each backend one.
	tests := []struct {
		sched   string
		weights []int
		check   func(t *testing.T, vs netip.AddrPort)
	}{
		{"rr", nil, func(t *testing.T, vs netip.AddrPort) {
			got := l.spread(t, clientIPs[0], vs, 30)
			logSpread(t, "rr", got)
			wantSpread(t, got, 10, 10, 10)
		}},
		{"wrr", []int{1, 2, 3}, func(t *testing.T, vs netip.AddrPort) {
			got := l.spread(t, clientIPs[0], vs, 60)
			logSpread(t, "wrr 1:2:3", got)
			wantSpread(t, got, 10, 20, 30)
		}},
		{"sh", nil, func(t *testing.T, vs netip.AddrPort) { l.sticky(t, "sh", vs, 10) }},
		{"dh", nil, func(t *testing.T, vs netip.AddrPort) {
			got := map[string]int{}
			for _, src := range clientIPs {
				for k, v := range l.spread(t, src, vs, 5) {
					got[k] += v
				}
			}
			logSpread(t, "dh", got)
			if len(got) != 1 {
				t.Errorf("dh: one destination IP went to %d backends, want 1", len(got))
			}
		}},
		{"lc", nil, func(t *testing.T, vs netip.AddrPort) { l.held(t, "lc", vs) }},
		{"wlc", nil, func(t *testing.T, vs netip.AddrPort) { l.held(t, "wlc", vs) }},
		{"sed", nil, func(t *testing.T, vs netip.AddrPort) { l.held(t, "sed", vs) }},
		{"nq", nil, func(t *testing.T, vs netip.AddrPort) { l.held(t, "nq", vs) }},
	}
	for i, tc := range tests {
		t.Run(tc.sched, func(t *testing.T) {
			key := kipvs.Key{Protocol: kipvs.TCP, Addr: netip.AddrPortFrom(vip, uint16(80+i))}
			must(t, l.ipvs.AddVirtualServer(ctx, kipvs.VirtualServer{Key: key, Scheduler: tc.sched}))
			t.Cleanup(func() { l.ipvs.DeleteVirtualServer(ctx, key) })
			for j, ip := range backendIPs {
				w := 1
				if tc.weights != nil {
					w = tc.weights[j]
				}
				rs := kipvs.RealServer{Addr: netip.AddrPortFrom(ip, backendPort), Weight: w}
				must(t, l.ipvs.AddRealServer(ctx, key, rs))
			}
			tc.check(t, key.Addr)
		})
	}
}

// TestPersistence: ClientIP affinity is a persistent virtual server; each client keeps
// its real server although the scheduler is round-robin.
func TestPersistence(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	vip := netip.MustParseAddr("198.18.0.11")
	must(t, l.links.EnsureDummy(ctx, "svcp-test0"))
	must(t, l.links.AddAddress(ctx, "svcp-test0", pfx(vip, 32)))
	key := kipvs.Key{Protocol: kipvs.TCP, Addr: netip.AddrPortFrom(vip, 80)}
	vs := kipvs.VirtualServer{Key: key, Scheduler: "rr", Persistent: true, Timeout: 60 * time.Second}
	must(t, l.ipvs.AddVirtualServer(ctx, vs))
	for _, ip := range backendIPs {
		must(t, l.ipvs.AddRealServer(ctx, key, kipvs.RealServer{Addr: netip.AddrPortFrom(ip, backendPort), Weight: 1}))
	}
	got, err := l.ipvs.VirtualServers(ctx)
	must(t, err)
	if len(got) != 1 || !got[0].Persistent || got[0].Timeout != 60*time.Second {
		t.Fatalf("virtual servers = %+v, want one persistent for 60s", got)
	}
	l.sticky(t, "rr+persistence", key.Addr, 10)
}

// sticky sends n connections from each client and wants each client on one backend.
func (l *lab) sticky(t *testing.T, name string, vs netip.AddrPort, n int) {
	t.Helper()
	total := map[string]int{}
	for _, src := range clientIPs {
		got := l.spread(t, src, vs, n)
		logSpread(t, fmt.Sprintf("%s client %s", name, src), got)
		if len(got) != 1 {
			t.Errorf("%s: client %s reached %d backends, want 1", name, src, len(got))
		}
		for k, v := range got {
			total[k] += v
		}
	}
	logSpread(t, name, total)
}

// held opens one connection per backend and keeps them open: a scheduler that counts
// connections must give each backend exactly one.
func (l *lab) held(t *testing.T, name string, vs netip.AddrPort) {
	t.Helper()
	got := map[string]int{}
	for range backendIPs {
		c := l.dial(t, clientIPs[0], vs)
		got[c.backend]++
	}
	logSpread(t, name+" (held)", got)
	wantSpread(t, got, 1, 1, 1)
}

func logSpread(t *testing.T, name string, got map[string]int) {
	t.Helper()
	t.Logf("spread %s: %s", name, formatSpread(got))
}

// wantSpread compares per-backend counts, in backendIPs order.
func wantSpread(t *testing.T, got map[string]int, want ...int) {
	t.Helper()
	for i, ip := range backendIPs {
		if got[ip.String()] != want[i] {
			t.Errorf("spread %s, want %v over %v", formatSpread(got), want, backendIPs)
			return
		}
	}
}
