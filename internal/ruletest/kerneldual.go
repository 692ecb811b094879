package ruletest

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// KernelDualStack: a dual-stack Service on the real kernel, with a mode per
// family as svcproxy runs them: each ClusterIP spreads over its family's
// endpoints and keeps the client address, affinity holds per client, the
// NodePort answers on the node's address of each family (masqueraded), a
// port without endpoints is refused in both, and Cleanup of each family
// leaves nothing.
func KernelDualStack(t *testing.T, path KernelPath) {
	l := NewDualLab(t, path)
	l.ServeTCP(t, 8080)
	eps := append(l.Endpoints(8080), l.Endpoints6(8080)...)
	dual := func(name, v4, v6 string, opts ...st.Opt) *service.Service {
		return st.Service(name, v4, 80, eps, append([]st.Opt{st.WithDualStack(v6)}, opts...)...)
	}
	empty := st.Service("empty", "198.18.0.30", 80, nil, st.WithDualStack("2001:db8:18::30"), st.WithNodePort(30081))
	snap := st.Snapshot(dual("web", "198.18.0.10", "2001:db8:18::10", st.WithNodePort(30080)),
		dual("sticky", "198.18.0.11", "2001:db8:18::11", st.WithAffinity(time.Minute)), empty)

	families := []struct {
		fam                service.Family
		client, node       netip.Addr
		web, sticky, empty netip.Addr
		nodeOnBackend      func(i int) string
	}{
		{service.IPv4, offloadtest.ClientAddr, netip.MustParseAddr("198.19.10.1"), netip.MustParseAddr("198.18.0.10"),
			netip.MustParseAddr("198.18.0.11"), netip.MustParseAddr("198.18.0.30"),
			func(i int) string { return fmt.Sprintf("198.19.%d.1", 11+i) }},
		{service.IPv6, offloadtest.ClientAddr6, netip.MustParseAddr("2001:db8:19::10:1"), netip.MustParseAddr("2001:db8:18::10"),
			netip.MustParseAddr("2001:db8:18::11"), netip.MustParseAddr("2001:db8:18::30"),
			func(i int) string { return fmt.Sprintf("2001:db8:19::%x:1", 0x11+i) }},
	}
	for _, f := range families {
		l.Sync(t, l.Mode(t, Options{Family: f.fam}), snap.Family(f.fam))
	}
	for _, f := range families {
		t.Run(string(f.fam), func(t *testing.T) {
			answers, err := offloadtest.Dial(l.Client, offloadtest.HostPort(f.web, 80), 30)
			if err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			for _, a := range answers {
				count[a.Backend]++
				if a.Client != f.client.String() {
					t.Errorf("%s saw client %s, want %s", a.Backend, a.Client, f.client)
				}
			}
			// Binomial(30, 1/3) below 2: probability ~1e-4 per backend.
			for _, b := range []string{"b0", "b1", "b2"} {
				if count[b] < 2 {
					t.Errorf("ClusterIP %s: backend %s got %d of 30: %v", f.web, b, count[b], count)
				}
			}
			sticky, err := offloadtest.Dial(l.Client, offloadtest.HostPort(f.sticky, 80), 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range sticky[1:] {
				if a.Backend != sticky[0].Backend {
					t.Errorf("affinity on %s: first %s, then %s", f.sticky, sticky[0].Backend, a.Backend)
				}
			}
			np, err := offloadtest.Dial(l.Client, offloadtest.HostPort(f.node, 30080), 6)
			if err != nil {
				t.Fatalf("NodePort on %s: %v", f.node, err)
			}
			for _, a := range np {
				if want := f.nodeOnBackend(int(a.Backend[1] - '0')); a.Client != want {
					t.Errorf("NodePort on %s: %s saw %s, want the node's %s (masqueraded)", f.node, a.Backend, a.Client, want)
				}
			}
			for _, dst := range []string{offloadtest.HostPort(f.empty, 80), offloadtest.HostPort(f.node, 30081)} {
				if _, err := offloadtest.Dial(l.Client, dst, 1); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("%s without endpoints: %v, want connection refused (REJECT)", dst, err)
				}
			}
		})
	}

	for _, f := range families {
		path.Cleanup(t, l.Lab, f.fam)
		if ours := path.Ours(t, l.Lab, f.fam); ours != "" {
			t.Errorf("after Cleanup of %s:\n%s", f.fam, ours)
		}
	}
}
