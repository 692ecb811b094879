package iptables

import (
	"context"
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
