package userspace

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

var (
	clientA = netip.MustParseAddr("198.19.9.1")
	clientB = netip.MustParseAddr("198.19.9.2")
)

func webSpec(affinity service.Affinity, endpoints ...string) svcSpec {
	return svcSpec{name: "default/web", port: "http", clusterIP: "198.18.0.10", svcPort: 80,
		affinity: affinity, endpoints: endpoints}
}

func portsOf(t *testing.T, specs ...svcSpec) []*service.Port {
	t.Helper()
	return snapshotOf(t, specs...).Ports()
}

// pick is one call to Balancer.Pick and the endpoint it must return ("" for an error).
type pick struct {
	client netip.Addr
	want   string
}

func TestBalancerPick(t *testing.T) {
	sticky := service.Affinity{ClientIP: true, Timeout: time.Minute}
	tests := []struct {
		name  string
		spec  svcSpec
		picks []pick
	}{
		{
			name: "round-robin in endpoint order",
			spec: webSpec(service.Affinity{}, "198.19.1.1:8080", "198.19.1.2:8080", "198.19.1.3:8080"),
			picks: []pick{{clientA, "198.19.1.1:8080"}, {clientA, "198.19.1.2:8080"},
				{clientB, "198.19.1.3:8080"}, {clientA, "198.19.1.1:8080"}},
		},
		{
			name:  "not-ready endpoints are skipped",
			spec:  webSpec(service.Affinity{}, "!198.19.1.1:8080", "198.19.1.2:8080"),
			picks: []pick{{clientA, "198.19.1.2:8080"}, {clientA, "198.19.1.2:8080"}},
		},
		{
			name: "ClientIP affinity keeps each client on its endpoint",
			spec: webSpec(sticky, "198.19.1.1:8080", "198.19.1.2:8080"),
			picks: []pick{{clientA, "198.19.1.1:8080"}, {clientB, "198.19.1.2:8080"},
				{clientA, "198.19.1.1:8080"}, {clientB, "198.19.1.2:8080"}},
		},
		{
			name:  "no endpoints",
			spec:  webSpec(service.Affinity{}),
			picks: []pick{{clientA, ""}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBalancer(newFakeClock())
			ports := portsOf(t, tt.spec)
			b.Update(ports)
			for i, p := range tt.picks {
				got, err := b.Pick(ports[0].Name, p.client)
				if err != nil {
					t.Logf("connection %d from %s: %v", i+1, p.client, err)
				} else {
					t.Logf("connection %d from %s -> %s", i+1, p.client, got)
				}
				if p.want == "" {
					if !errors.Is(err, ErrNoEndpoints) {
						t.Fatalf("pick %d: got %v, %v; want ErrNoEndpoints", i, got, err)
					}
					continue
				}
				if err != nil || got.String() != p.want {
					t.Fatalf("pick %d from %s: got %v, %v; want %s", i, p.client, got, err, p.want)
				}
			}
		})
	}
}

func TestBalancerAffinityExpiresAndSweeps(t *testing.T) {
	clock := newFakeClock()
	b := NewBalancer(clock)
	ports := portsOf(t, webSpec(service.Affinity{ClientIP: true, Timeout: time.Minute},
		"198.19.1.1:8080", "198.19.1.2:8080"))
	name := ports[0].Name
	b.Update(ports)

	mustPick(t, b, name, clientA, "198.19.1.1:8080")
	clock.Step(59 * time.Second)
	mustPick(t, b, name, clientA, "198.19.1.1:8080") // still sticky, and refreshed
	clock.Step(59 * time.Second)
	mustPick(t, b, name, clientA, "198.19.1.1:8080")
	clock.Step(time.Minute)
	// Idle for the whole timeout: the entry expired, round-robin goes on.
	mustPick(t, b, name, clientA, "198.19.1.2:8080")

	mustPick(t, b, name, clientB, "198.19.1.1:8080")
	clock.Step(time.Minute)
	if n := b.Sweep(); n != 2 {
		t.Errorf("Sweep removed %d entries, want 2", n)
	}
	if n := b.Sweep(); n != 0 {
		t.Errorf("second Sweep removed %d entries, want 0", n)
	}
}

func TestBalancerResetAfterFailure(t *testing.T) {
	b := NewBalancer(newFakeClock())
	ports := portsOf(t, webSpec(service.Affinity{ClientIP: true, Timeout: time.Hour},
		"198.19.1.1:8080", "198.19.1.2:8080"))
	name := ports[0].Name
	b.Update(ports)
	mustPick(t, b, name, clientA, "198.19.1.1:8080")
	b.Reset(name, clientA) // 198.19.1.1 refused the connection
	mustPick(t, b, name, clientA, "198.19.1.2:8080")
	mustPick(t, b, name, clientA, "198.19.1.2:8080")
}

func TestBalancerUpdatePurgesRemovedEndpoints(t *testing.T) {
	b := NewBalancer(newFakeClock())
	sticky := service.Affinity{ClientIP: true, Timeout: time.Hour}
	ports := portsOf(t, webSpec(sticky, "198.19.1.1:8080", "198.19.1.2:8080"))
	name := ports[0].Name
	b.Update(ports)
	mustPick(t, b, name, clientA, "198.19.1.1:8080")
	mustPick(t, b, name, clientB, "198.19.1.2:8080")

	// 198.19.1.1 goes away: clientA's entry must go with it, clientB's stays.
	b.Update(portsOf(t, webSpec(sticky, "198.19.1.2:8080", "198.19.1.3:8080")))
	if n := len(b.ports[name].clients); n != 1 {
		t.Fatalf("after update: %d affinity entries, want 1", n)
	}
	mustPick(t, b, name, clientB, "198.19.1.2:8080")
	mustPick(t, b, name, clientA, "198.19.1.2:8080") // round-robin goes on from position 0

	// The Service goes away: its port is forgotten.
	b.Update(nil)
	if _, err := b.Pick(name, clientA); !errors.Is(err, ErrNoEndpoints) {
		t.Fatalf("pick after removal: %v, want ErrNoEndpoints", err)
	}
}

func mustPick(t *testing.T, b *Balancer, name service.PortName, client netip.Addr, want string) {
	t.Helper()
	got, err := b.Pick(name, client)
	if err != nil || got.String() != want {
		t.Fatalf("Pick(%s, %s) = %v, %v; want %s", name, client, got, err, want)
	}
}
