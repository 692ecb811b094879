package lab

import (
	"context"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/pods"
)

// TestDualStackLab builds the file-fed lab, which is dual-stack, and checks
// Service web-dual (PreferDualStack) over both families in every mode this
// kernel runs: its ClusterIPs (TCP and UDP) answered by all three pods, its
// NodePort on both node addresses from outside the cluster, the address the
// pods saw (the client's own through the kernel paths, the node's through
// userspace), and its AAAA record; and that the single-stack Service web has
// no IPv6 side.
func TestDualStackLab(t *testing.T) {
	netnstest.RequireRoot(t, lab.DemoTools...)
	bin := build(t)
	t.Cleanup(func() {
		down(t, bin)
		requireClean(t, bin)
	})
	down(t, bin)
	l, err := lab.New(lab.Config{Stdout: io.Discard, Self: bin + "/svclab", BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	c := &cpLab{t: t, bin: bin, l: l}
	c.svclab("up")
	p := l.Plan()
	client, _ := p.Host("client")

	if got := c.dig("-t", "AAAA", "web-dual.default.svc.cluster.local"); !slices.Equal(got, []string{"2001:db8:18::24"}) {
		t.Errorf("web-dual AAAA: %v, want 2001:db8:18::24", got)
	}
	if got := c.dig("-t", "AAAA", "web.default.svc.cluster.local"); len(got) != 0 {
		t.Errorf("web (SingleStack IPv4) AAAA: %v, want none", got)
	}

	modes := []string{"userspace", "iptables", "hybrid"}
	if _, err := exec.LookPath("nft"); err == nil {
		modes = append(modes, "nftables")
	}
	web := []string{"web-0", "web-1", "web-2"}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			c.t = t
			if mode != "userspace" {
				c.svclab("mode", mode)
			}
			// The kernel paths keep the client's address; userspace is the
			// pods' client itself. A hybrid port may be promoted while the
			// checks run (they send 10 connections a second): either.
			via4, via6 := client.Addr, client.Addr6
			switch mode {
			case "userspace":
				via4, via6 = p.Node.Addr, p.Node.Addr6
			case "hybrid":
				via4, via6 = netip.Addr{}, netip.Addr{}
			}
			for _, tc := range []struct {
				target string
				ipv6   bool
				from   string
				saw    netip.Addr
			}{
				{"web-dual", false, "client", via4},
				{"web-dual", true, "client", via6},
				{"udp://web-dual:7", true, "client", via6},
				{"[2001:db8:18::24]:80", false, "client", via6},
				// From beyond --cluster-cidr a NodePort is masqueraded in
				// every mode: the pods see the node.
				{"198.19.0.1:30082", false, "outside", p.Node.Addr},
				{"[2001:db8:19::1]:30082", false, "outside", p.Node.Addr6},
				{"udp://[2001:db8:19::1]:30083", false, "outside", p.Node.Addr6},
			} {
				// The kernel paths pick at random: in 30 requests each of
				// three pods answers but for a chance of 3·(2/3)^30, 1 in 65,000.
				pods, saw, failed := c.tally(pods.TrafficOptions{Target: tc.target, IPv6: tc.ipv6, From: tc.from, N: 30})
				sawOK := !tc.saw.IsValid() || slices.Equal(saw, []netip.Addr{tc.saw})
				if failed > 0 || !slices.Equal(pods, web) || !sawOK {
					t.Errorf("%s (ipv6 %t) from %s: answers from %v, pods saw %v, %d failed; want %v, who saw %s",
						tc.target, tc.ipv6, tc.from, pods, saw, failed, web, tc.saw)
				}
			}
			// web is SingleStack IPv4: no IPv6 ClusterIP to resolve.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := l.Traffic(ctx, pods.TrafficOptions{Target: "web", IPv6: true, N: 1}); err == nil || !strings.Contains(err.Error(), "resolve web (ip6)") {
				t.Errorf("traffic --ipv6 web: %v, want a failed lookup", err)
			}
		})
	}
}

// tally sends the requests of opts and returns which pods answered and the
// client addresses they saw, both sorted, and how many requests failed.
func (c *cpLab) tally(opts pods.TrafficOptions) ([]string, []netip.Addr, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tally, err := c.l.Traffic(ctx, opts)
	if tally == nil {
		c.t.Fatalf("traffic %s: %v", opts.Target, err)
	}
	var names []string
	for _, p := range tally.Pods {
		names = append(names, p.Pod)
	}
	sort.Strings(names)
	saw := tally.Sources()
	slices.SortFunc(saw, func(a, b netip.Addr) int { return a.Compare(b) })
	if err != nil && tally.Failed == 0 {
		c.t.Fatalf("traffic %s: %v", opts.Target, err)
	}
	return names, saw, tally.Failed
}
