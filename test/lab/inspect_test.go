package lab

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/pods"
)

// TestInspect drives `svclab rules`, `svclab trace` and `svclab conntrack`
// on a real lab, in iptables then userspace mode, and checks that what they
// show is what the traffic did: the DNAT rules' counters add up to the
// requests sent, the conntrack table holds one DNATed entry per request in
// iptables mode and two per request in userspace mode (the REDIRECTed
// client connection and svcproxy's own), and the trace of the node's live
// rules ends where the kernel sends such packets.
func TestInspect(t *testing.T) {
	netnstest.RequireRoot(t, append(lab.DemoTools, "conntrack", "nft")...)
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
	start := time.Now()
	c.svclab("up", "--mode", "iptables")
	t.Logf("svclab up --mode iptables: %s", time.Since(start).Round(time.Millisecond))

	t.Run("help", func(t *testing.T) {
		c.t = t
		checkHelp(c)
	})
	t.Run("iptables", func(t *testing.T) {
		c.t = t
		inspectIptables(c)
	})
	t.Run("outside", func(t *testing.T) {
		c.t = t
		fromOutside(c)
	})
	t.Run("userspace", func(t *testing.T) {
		c.t = t
		c.svclab("mode", "userspace")
		inspectUserspace(c)
	})
	t.Run("pod", func(t *testing.T) {
		c.t = t
		changePods(c)
	})
	t.Run("hybrid", func(t *testing.T) {
		c.t = t
		c.svclab("mode", "hybrid")
		promotionTimeline(c)
	})
}

// checkHelp: every command's --help names its flags.
func checkHelp(c *cpLab) {
	for cmd, flags := range map[string][]string{
		"rules":     {"--counters"},
		"trace":     {"--pick"},
		"conntrack": {"--flush"},
		"pod":       {"--kill", "--start", "--ready", "--terminating"},
	} {
		args := []string{cmd, "--help"}
		if cmd == "pod" {
			args = []string{cmd, "web-0", "--help"}
		}
		out := c.svclab(args...)
		for _, f := range append(flags, "usage: svclab "+cmd) {
			if !strings.Contains(out, strings.TrimPrefix(f, "-")) {
				c.t.Errorf("svclab %s --help lacks %q:\n%s", cmd, f, out)
			}
		}
	}
	out, _ := svclab(c.t.Context(), c.bin)
	for _, want := range []string{"rules [SERVICE] [--counters]", "trace FROM SERVICE[:PORT]", "conntrack [SERVICE] [--flush]", "--from HOST"} {
		if !strings.Contains(out, want) {
			c.t.Errorf("svclab's usage lacks %q:\n%s", want, out)
		}
	}
}

// flat is s with every run of spaces and line breaks one space: the
// commands wrap their prose.
func flat(s string) string { return strings.Join(strings.Fields(s), " ") }

// counted is the first column of `svclab rules --counters`, the packets a
// rule matched, for the rules whose text contains every one of parts.
var counted = regexp.MustCompile(`^\s+([0-9]+)\s+(-A .*)$`)

func sumCounters(out string, parts ...string) (sum, rules int) {
	for _, line := range strings.Split(out, "\n") {
		m := counted.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(m[2], p)
		}
		if all {
			n, _ := strconv.Atoi(m[1])
			sum += n
			rules++
		}
	}
	return sum, rules
}

func inspectIptables(c *cpLab) {
	t := c.t
	c.svclab("conntrack", "--flush")
	const n = 9
	if pods, failed := c.answers("web", n); failed > 0 || len(pods) == 0 {
		t.Fatalf("traffic web: answers from %v, %d failed", pods, failed)
	}

	out := c.svclab("rules", "web", "--counters")
	t.Logf("svclab rules web --counters:\n%s", out)
	for _, want := range []string{
		"# default/web: ClusterIP 198.18.0.20, port http 80/TCP",
		"default/web:http -> 198.19.1.10:8080 (web-0)",
		"default/web:http -> 198.19.1.12:8080 (web-2)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("svclab rules web --counters lacks %q", want)
		}
	}
	if strings.Contains(out, "web-sticky") || strings.Contains(out, "kube-dns") {
		t.Errorf("svclab rules web shows other Services' rules")
	}
	// Every new connection to web took exactly one endpoint's DNAT rule.
	if sum, rules := sumCounters(out, "default/web:http", "-j DNAT"); sum != n || rules != 3 {
		t.Errorf("web's DNAT rules counted %d packets in %d rules, want %d in 3", sum, rules, n)
	}

	out = c.svclab("trace", "client", "web")
	t.Logf("svclab trace client web:\n%s", out)
	for _, want := range []string{
		"default/web:http is 198.18.0.20:80/TCP; svcproxy runs iptables mode.",
		"=> DNAT 198.19.1.10:8080",
		"0 DNAT 198.19.1.10:8080 (web-0)",
		"2 DNAT 198.19.1.12:8080 (web-2)",
		"the pod sees 198.19.1.2 (client)",
	} {
		if !strings.Contains(flat(out), want) {
			t.Errorf("svclab trace client web lacks %q", want)
		}
	}
	out = c.svclab("trace", "client", "web", "--pick", "2")
	if !strings.Contains(out, "result: DNAT 198.19.1.12:8080") {
		t.Errorf("svclab trace client web --pick 2 does not end at web-2:\n%s", out)
	}

	out = c.svclab("conntrack", "web")
	t.Logf("svclab conntrack web:\n%s", out)
	if got := strings.Count(out, "-> 198.18.0.20:80 "); got != n {
		t.Errorf("svclab conntrack web: %d entries to the ClusterIP, want %d:\n%s", got, n, out)
	}
	if got := strings.Count(out, "DNAT to 198.19.1.1"); got != n {
		t.Errorf("svclab conntrack web: %d DNATed entries, want %d", got, n)
	}
}

func inspectUserspace(c *cpLab) {
	t := c.t
	c.svclab("conntrack", "--flush")
	const n = 4
	if pods, failed := c.answers("web", n); failed > 0 || len(pods) == 0 {
		t.Fatalf("traffic web: answers from %v, %d failed", pods, failed)
	}
	out := c.svclab("conntrack", "web")
	t.Logf("svclab conntrack web:\n%s", out)
	if got := strings.Count(out, "REDIRECT to svcproxy's listener"); got != n {
		t.Errorf("svclab conntrack web: %d REDIRECTed client connections, want %d", got, n)
	}
	if got := strings.Count(out, "svcproxy's own connection to 198.19.1.1"); got != n {
		t.Errorf("svclab conntrack web: %d connections of svcproxy to pods, want %d", got, n)
	}

	out = c.svclab("trace", "client", "web")
	t.Logf("svclab trace client web:\n%s", out)
	if !strings.Contains(out, "REDIRECT") || !strings.Contains(out, "svcproxy runs userspace mode") {
		t.Errorf("svclab trace client web in userspace mode shows no REDIRECT")
	}
	out = c.svclab("rules", "web", "--counters")
	if sum, rules := sumCounters(out, "default/web:http", "REDIRECT"); sum < n || rules == 0 {
		t.Errorf("web's REDIRECT rules counted %d packets in %d rules, want %d:\n%s", sum, rules, n, out)
	}
}

// sawFrom sends n requests to target from lab host from and returns which
// pods answered and which client addresses they saw, each sorted.
func (c *cpLab) sawFrom(from, target string, n int) (names, sources []string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tally, err := c.l.Traffic(ctx, pods.TrafficOptions{Target: target, N: n, From: from})
	if err != nil {
		c.t.Fatalf("traffic --from %s %s: %v", from, target, err)
	}
	for _, p := range tally.Pods {
		names = append(names, p.Pod)
		for _, a := range p.Sources {
			if !slices.Contains(sources, a.String()) {
				sources = append(sources, a.String())
			}
		}
	}
	slices.Sort(names)
	slices.Sort(sources)
	return names, sources
}

// fromOutside: the outside host is beyond the cluster's range, so its
// traffic to a ClusterIP and to a NodePort of policy Cluster is masqueraded
// (the pods see the node), while a NodePort of policy Local keeps its address
// and reaches only the node's own endpoints (web-0 and web-1: the manifests
// place web-2 on another node).
func fromOutside(c *cpLab) {
	t := c.t
	const node, outside, client = "198.19.0.1", "198.19.200.2", "198.19.1.2"
	for _, tc := range []struct {
		from, target string
		pods         []string
		source       string
	}{
		{"client", "web", []string{"web-0", "web-1", "web-2"}, client},
		{"outside", "198.18.0.20:80", []string{"web-0", "web-1", "web-2"}, node},
		{"outside", node + ":30080", []string{"web-0", "web-1", "web-2"}, node},
		{"client", node + ":30080", []string{"web-0", "web-1", "web-2"}, node},
		{"outside", node + ":30081", []string{"web-0", "web-1"}, outside},
	} {
		// iptables mode picks at random: in 30 requests each of three pods
		// answers but for a chance of 3·(2/3)^30, 1 in 65,000 (with 24 it
		// was 1 in 5,500 per check, and one CI run met it).
		pods, sources := c.sawFrom(tc.from, tc.target, 30)
		if !slices.Equal(sources, []string{tc.source}) || !slices.Equal(pods, tc.pods) {
			t.Errorf("traffic --from %s %s: pods %v saw %v, want pods %v to see %s", tc.from, tc.target, pods, sources, tc.pods, tc.source)
		}
	}
	out := c.svclab("trace", "outside", "web")
	t.Logf("svclab trace outside web:\n%s", out)
	if !strings.Contains(flat(out), "SVCP-MARK-MASQ") || !strings.Contains(flat(out), fmt.Sprintf("the pod sees %s (node)", node)) {
		t.Errorf("svclab trace outside web: no masquerade to the node's address")
	}
	// The outside host has no route to the pods: only Services reach them.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := svclab(ctx, c.bin, "exec", "outside", "--", "curl", "-s", "--max-time", "2", "http://198.19.1.10:8080/"); err == nil {
		t.Errorf("the outside host reached a pod directly: %s", out)
	}
}

// changePods turns pods unready, terminating, kills and starts one, with
// svclab pod, and checks where traffic goes (svcproxy in userspace mode,
// which retries a refused connection on the next endpoint).
func changePods(c *cpLab) {
	all := []string{"web-0", "web-1", "web-2"}
	c.svclab("pod", "web-1", "--ready=false")
	c.eventually("web-1 unready gets no traffic", c.servedBy("web", 12, "web-0", "web-2"))
	c.svclab("pod", "web-1", "--ready=true")
	c.eventually("web-1 ready again", c.servedBy("web", 12, all...))

	// No ready endpoint left but a terminating one: proxies fall back to it.
	c.svclab("pod", "web-0", "--ready=false")
	c.svclab("pod", "web-1", "--ready=false")
	c.svclab("pod", "web-2", "--terminating")
	c.eventually("only terminating web-2 serves", c.servedBy("web", 6, "web-2"))
	for _, p := range all {
		c.svclab("pod", p, "--ready=true")
	}
	c.eventually("all ready again", c.servedBy("web", 12, all...))

	// A crashed pod stays an endpoint: svcproxy's userspace proxy is
	// refused there and retries the next endpoint, so no request fails.
	out := c.svclab("pod", "web-2", "--kill")
	if !strings.Contains(out, "pod web-2: killed") {
		c.t.Errorf("svclab pod web-2 --kill: %s", out)
	}
	if pods, failed := c.answers("web", 12); failed != 0 || !slices.Equal(pods, []string{"web-0", "web-1"}) {
		c.t.Errorf("web-2 killed: answers from %v, %d failed; want web-0 and web-1, none failed", pods, failed)
	}
	c.svclab("pod", "web-2", "--start")
	c.eventually("web-2 started again", c.servedBy("web", 12, all...))
}

// promotionTimeline sends web 20 requests a second in hybrid mode (the lab
// promotes at 10 a second held for 2s) with --timeline: the first answers
// come through userspace (the pods see the node), the last through the
// kernel (they see the client), and none fails on the way.
func promotionTimeline(c *cpLab) {
	t := c.t
	out := c.svclab("traffic", "--rate", "20", "--n", "200", "--timeline", "web")
	t.Logf("svclab traffic --rate 20 --n 200 --timeline web:\n%s", out)
	var rows [][]int
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		var row []int
		for _, s := range f[:4] {
			n, err := strconv.Atoi(s)
			if err != nil {
				break
			}
			row = append(row, n)
		}
		if len(row) == 4 {
			rows = append(rows, row) // second, userspace, kernel, failed
		}
	}
	if len(rows) < 3 {
		t.Fatalf("no timeline in the output")
	}
	first, last := rows[0], rows[len(rows)-1]
	if first[1] == 0 || first[2] != 0 {
		t.Errorf("second 0: %d through userspace, %d through the kernel; want userspace only", first[1], first[2])
	}
	if last[2] == 0 || last[1] != 0 {
		t.Errorf("last second: %d through userspace, %d through the kernel; want the kernel only", last[1], last[2])
	}
	for _, r := range rows {
		if r[3] != 0 {
			t.Errorf("second %d: %d requests failed during the promotion", r[0], r[3])
		}
	}
	status, err := c.l.Cluster().Daemons().NodeGet(t.Context(), "/status")
	if err != nil || !strings.Contains(status, "default/web:http") {
		t.Fatalf("svcproxy /status: %v\n%s", err, status)
	}
	t.Logf("svcproxy /status after the promotion:\n%s", status)
}
