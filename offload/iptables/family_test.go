package iptables

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/ruletest"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The IPv6 side of the test cluster (internal/ruletest): this node at
// 2001:db8:19::1, pods in 2001:db8:19::1:0/112, services in 2001:db8:18::/112.
var testConfig6 = Config{Node: ruletest.Options{Family: service.IPv6}.Node(false)}

// One Snapshot, two rule sets (their golden files are internal/ruletest's
// CheckFamiliesGolden): each family's rules apply to that family's binary;
// the Fake refuses the other family's addresses, as ip6tables does.
func TestRenderFamiliesRestore(t *testing.T) {
	snap := ruletest.FamiliesSnapshot()
	for _, tt := range ruletest.FamilyRenders() {
		t.Run(tt.Name, func(t *testing.T) {
			got, err := Render(Config{Node: tt.Node}, snap)
			if err != nil {
				t.Fatal(err)
			}
			f := kiptables.NewFakeFamily(kiptables.Family(tt.Node.Family))
			if tt.Node.Family == "" {
				f = kiptables.NewFake()
			}
			if err := f.Restore(context.Background(), got); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Cleanup empties the ip6tables tables as it empties iptables'.
func TestCleanupIPv6(t *testing.T) {
	f := kiptables.NewFakeFamily(kiptables.IPv6)
	empty := f.Dump()
	cfg := testConfig6
	cfg.IPTables = f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustSync(t, p, st.Snapshot(st.Service("web", "198.18.0.10", 80, ruletest.DualEndpoints(), st.WithDualStack("2001:db8:18::10"), st.WithNodePort(30080))))
	if !strings.Contains(f.Dump(), "2001:db8:18::10") {
		t.Fatalf("nothing synced:\n%s", f.Dump())
	}
	if err := Cleanup(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	if got := f.Dump(); strings.Contains(got, "SVCP") {
		t.Errorf("after Cleanup:\n%s\nwant no SVCP chain or hook (empty: %s)", got, empty)
	}
}

// noMangle is a kernel whose mangle table nothing has loaded, as on
// iptables-legacy before iptable_mangle is: iptables-save of it fails.
type noMangle struct{ *kiptables.Fake }

func (n noMangle) Save(ctx context.Context, t kiptables.Table) ([]byte, error) {
	if t == kiptables.TableMangle {
		return nil, fmt.Errorf("iptables-save -t mangle: %w: Table does not exist (do you need to insmod?)", kiptables.ErrNoTable)
	}
	return n.Fake.Save(ctx, t)
}

// TestCleanupWithoutMangle: svcproxy --cleanup on a kernel without the mangle
// table (a node that never ran the iptables mode, whose canary lives there)
// removes the rest and says nothing failed; the periodic check finds no
// canary there, which asks for a full sync, not an error.
func TestCleanupWithoutMangle(t *testing.T) {
	f := kiptables.NewFake()
	cfg := testConfig
	cfg.IPTables = f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustSync(t, p, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints())))
	ok, err := hasCanary(context.Background(), noMangle{f}, tableMangle)
	if ok || err != nil {
		t.Errorf("hasCanary without a mangle table = %v, %v; want false, nil", ok, err)
	}
	if err := Cleanup(context.Background(), noMangle{f}); err != nil {
		t.Fatalf("Cleanup without a mangle table: %v", err)
	}
	// The Fake's mangle keeps its canary (the test hid that table); nat and
	// filter, after it in the dump, must hold nothing of svcproxy's.
	got := f.Dump()
	if _, rest, ok := strings.Cut(got, "*nat"); !ok || strings.Contains(rest, "SVCP") {
		t.Errorf("after Cleanup, nat or filter still holds svcproxy's rules:\n%s", got)
	}
}
