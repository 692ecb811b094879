package lab

import (
	"context"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/pods"
)

// svclab up --mode socklb runs svcproxy's socket LB attached at the lab's
// cgroup2 subtree. The client's connections to web (its processes are in
// the subtree) reach all three pods, each pod sees the client's own address,
// and the node's conntrack has no entry for the ClusterIP: the socket
// connected to the pod itself, no packet was translated. A process in the
// client's network namespace but outside the subtree is not translated by
// the hook: the nftables path beside DNATs it (one conntrack entry for the
// ClusterIP). An endpoint leaving and coming back under traffic fails no
// connection.
func TestModeSocketLB(t *testing.T) {
	netnstest.RequireRoot(t, append(lab.DemoTools, "nft", "conntrack")...)
	bin := build(t)
	t.Cleanup(func() {
		down(t, bin)
		requireClean(t, bin)
	})
	l, err := lab.New(lab.Config{Stdout: io.Discard, Self: bin + "/svclab", BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	c := &cpLab{t: t, bin: bin, l: l}
	c.svclab("up", "--mode", "socklb")
	p := l.Plan()
	client, _ := p.Host("client")
	const vip = "198.18.0.20" // web

	// svclab rules shows the socket LB's maps; svclab trace walks the
	// client's connect() through the program, and the outside host's packet
	// (not in the subtree) through the nftables path beside.
	if out := c.svclab("rules", "web"); !strings.Contains(out, "    slot 0 -> 198.19.1.10:8080 (web-0)\n    slot 1 -> 198.19.1.11:8080 (web-1)") {
		t.Errorf("svclab rules web: want the socket LB's services and backends maps:\n%s", out)
	}
	if out := c.svclab("trace", "client", "web", "--pick", "1"); !strings.Contains(out, "result: rewritten to 198.19.1.11:8080") {
		t.Errorf("svclab trace client web --pick 1: want connect4 rewriting to web-1:\n%s", out)
	}
	if out := c.svclab("trace", "outside", "web"); !strings.Contains(out, "not in the lab's cgroup2 subtree") || !strings.Contains(out, "dnat to 198.19.1.10:8080") {
		t.Errorf("svclab trace outside web: want no socket hook, then the nftables DNAT:\n%s", out)
	}

	c.svclab("conntrack", "--flush")
	names, sources, failed := c.tally(pods.TrafficOptions{Target: "web", N: 30})
	if failed != 0 || !slices.Equal(names, []string{"web-0", "web-1", "web-2"}) {
		t.Errorf("30 connections to web from the client: pods %v, %d failed; want web-0, web-1 and web-2, none failed", names, failed)
	}
	if !slices.Equal(sources, []netip.Addr{client.Addr}) {
		t.Errorf("the pods saw %v, want the client's own address %s", sources, client.Addr)
	}
	if n := c.conntrackTo(vip); n != 0 {
		t.Errorf("after the client's connections the node's conntrack has %d entries for %s, want none (the socket LB translates no packet)", n, vip)
	}
	// UDP (sendmsg/recvmsg: the answers must come from the Service address,
	// or the probe's socket would not take them) and IPv6 (connect6).
	for _, opts := range []pods.TrafficOptions{
		{Target: "udp://echo:7", N: 30},
		{Target: "web-dual", N: 30, IPv6: true},
		{Target: "udp://web-dual:7", N: 30, IPv6: true},
	} {
		names, _, failed := c.tally(opts)
		if failed != 0 || !slices.Equal(names, []string{"web-0", "web-1", "web-2"}) {
			t.Errorf("30 requests to %s (IPv6 %v): pods %v, %d failed; want web-0, web-1 and web-2, none failed", opts.Target, opts.IPv6, names, failed)
		}
	}
	if n := c.conntrackTo("198.18.0.30") + c.conntrackTo("2001:db8:18::24"); n != 0 {
		t.Errorf("after UDP and IPv6 traffic the node's conntrack has %d entries for echo's and web-dual's ClusterIPs, want none", n)
	}

	// The same namespace, a process outside the subtree (ip netns exec does
	// not place it in the client's cgroup, svclab exec would).
	out, err := exec.Command("ip", "netns", "exec", p.Namespace("client"),
		"curl", "-sS", "--max-time", "5", "http://"+vip+"/").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "web-") {
		t.Fatalf("curl %s from the client's namespace, outside the subtree: %v\n%s", vip, err, out)
	}
	if n := c.conntrackTo(vip); n != 1 {
		t.Errorf("after one connection from outside the subtree the node's conntrack has %d entries for %s, want 1 (the nftables path's DNAT)", n, vip)
	}

	// web-2 leaves the endpoints and comes back while 60 requests run, 20 a
	// second: the socket LB's maps change element by element, and no
	// connect() fails.
	done := make(chan struct{})
	var tallyFailed int
	var tallyPods []string
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		tally, err := l.Traffic(ctx, pods.TrafficOptions{Target: "web", N: 60, Rate: 20})
		if err != nil && tally == nil {
			t.Errorf("traffic: %v", err)
			return
		}
		tallyFailed = tally.Failed
		for _, pc := range tally.Pods {
			tallyPods = append(tallyPods, pc.Pod)
		}
	}()
	c.svclab("pod", "web-2", "--ready=false")
	c.svclab("pod", "web-2", "--ready=true")
	<-done
	if tallyFailed != 0 {
		t.Errorf("60 requests across web-2 leaving and returning: %d failed, want 0", tallyFailed)
	}
	t.Logf("across the endpoint change: answered by %v", tallyPods)
}

// conntrackTo counts the node's conntrack entries whose original
// destination is addr.
func (c *cpLab) conntrackTo(addr string) int {
	c.t.Helper()
	fam := "ipv4"
	if strings.Contains(addr, ":") {
		fam = "ipv6"
	}
	out := c.svclab("exec", "node", "--", "conntrack", "-L", "-f", fam, "--orig-dst", addr)
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "dst="+addr+" ") {
			n++
		}
	}
	return n
}

// svclab mode --offload socklb --demote-after 3s hybrid: web starts in
// userspace (the pods see the node) and is promoted to the socket LB under
// 20 requests a second (the pods see the client, its path is socklb), a
// connection held open across the promotion, no request failed; under 4
// requests a second, below the promotion rate (the socket LB's counter tells
// hybrid, docs/hybrid.md), it returns to userspace after 3s, no request
// failed. The same both ways with --offload nftables.
func TestHybridSocketLB(t *testing.T) {
	netnstest.RequireRoot(t, append(lab.DemoTools, "nft")...)
	bin := build(t)
	t.Cleanup(func() {
		down(t, bin)
		requireClean(t, bin)
	})
	l, err := lab.New(lab.Config{Stdout: io.Discard, Self: bin + "/svclab", BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	c := &cpLab{t: t, bin: bin, l: l}
	c.svclab("up")
	p := l.Plan()
	client, _ := p.Host("client")
	path := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		v, err := l.Services(ctx)
		if err != nil {
			t.Fatalf("services: %v", err)
		}
		for _, sp := range v.Ports {
			if sp.Name == "default/web:http" {
				return sp.Path
			}
		}
		t.Fatal("no port default/web:http in svclab's services view")
		return ""
	}
	// traffic sends n requests at rate a second to web and checks that none
	// failed (nor the held connection, with hold) and that the pods saw
	// both the node (userspace) and the client (the kernel path).
	traffic := func(what string, n int, rate float64, hold bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		tally, err := l.Traffic(ctx, pods.TrafficOptions{Target: "web", N: n, Rate: rate, Hold: hold})
		if tally == nil {
			t.Fatalf("traffic: %v", err)
		}
		if err != nil || tally.Failed != 0 {
			t.Errorf("%d requests across the %s: %d failed (%v)", n, what, tally.Failed, err)
		}
		if !slices.Contains(tally.Sources(), client.Addr) || !slices.Contains(tally.Sources(), p.Node.Addr) {
			t.Errorf("across the %s the pods saw %v: want the node (userspace) and the client (the kernel path)", what, tally.Sources())
		}
	}

	c.svclab("mode", "--offload", "socklb", "--demote-after", "3s", "hybrid")
	if got := path(); got != "userspace" {
		t.Fatalf("web's path before any traffic: %q, want userspace", got)
	}
	// 20 a second, above --promote-conn-rate 10 for 2s.
	traffic("promotion to socklb", 100, 20, true)
	if got := path(); got != "socklb" {
		t.Fatalf("web's path after 100 requests at 20/s: %q, want socklb", got)
	}
	traffic("demotion from socklb", 40, 4, true)
	if got := path(); got != "userspace" {
		t.Errorf("web's path after 10s at 4/s: %q, want userspace", got)
	}

	c.svclab("mode", "--offload", "nftables", "--demote-after", "3s", "hybrid")
	traffic("promotion to nftables", 100, 20, false)
	if got := path(); got != "nftables" {
		t.Fatalf("web's path after 100 requests at 20/s: %q, want nftables", got)
	}
	traffic("demotion from nftables", 40, 4, true)
	if got := path(); got != "userspace" {
		t.Errorf("web's path after 10s at 4/s: %q, want userspace", got)
	}
}
