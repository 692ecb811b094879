package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
)

// TestHybridSocketLB runs svcproxy --mode hybrid --offload socklb on the real
// kernel. A connection opened through web's portal (userspace) before the
// promotion; then a pod process in the cgroup connecting every 10 ms makes
// web hot, and hybrid promotes it to the socket LB: web's element goes into
// the maps before its portal goes. After it, the cgroup's connects no longer
// reach the userspace proxier (its connection counter for web stands still
// while they go on and are answered) and the socket LB's counter
// (svcproxy_socklb_port_connections_total) rises with them; the connection
// opened in userspace still echoes. Then the same process slows to a connect
// every 500 ms, below --promote-conn-rate: the socket LB's counter shows web
// quiet, and after --demote-after hybrid demotes it (its portal back, then
// its element gone): the userspace proxier counts web's connects again. One
// connection loop runs across both switches and none of its connects fails.
// Then nftables mode, started on the same node after hybrid, removes the
// socket LB hybrid left pinned: no program stays attached.
func TestHybridSocketLB(t *testing.T) {
	netnstest.RequireRoot(t, "nft", "ip", "iptables-restore", "iptables-save")
	if err := knft.Available(); err != nil {
		t.Skipf("nftables unavailable, and the socket LB needs it beside: %v", err)
	}
	cg := newTestCgroup(t)
	lab := offloadtest.New(t, "node-a")
	lab.AddIPv6(t)
	lab.ServeEcho(t, 8080) // greets with the backend's name, then echoes
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(socketLBManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	pin := filepath.Join(newTestBPFFS(t), "svcproxy")
	logs, stop := startSvcproxyStoppable(t, lab.Node, "--mode", "hybrid", "--offload", "socklb",
		"--promote-conn-rate", "10", "--promote-after", "1s", "--demote-after", "2s",
		"--socklb-cgroup", netnstest.HostPath(cg.path), "--socklb-pin-path", pin,
		"--services", file, "--hostname-override", "node-a", "--cluster-cidr", "198.19.8.0/21,2001:db8:19::/64",
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249")
	const vip = "198.18.0.10:80"
	deadline := time.Now().Add(time.Minute)
	for d := dialFromCgroup(t, lab.Client, cg, vip, 1)[0]; d.err != ""; d = dialFromCgroup(t, lab.Client, cg, vip, 1)[0] {
		if time.Now().After(deadline) {
			t.Fatalf("web's portal never answered: %+v\n%s", d, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	long, backend := lab.DialEcho(t, vip) // through the portal, to finish after the promotion
	defer long.Close()
	t.Logf("the long connection, opened in userspace, reached %s", backend)

	flow := startDialing(t, lab.Client, cg, vip)
	if !logs.waitFor("service port promoted", "path=socklb") {
		t.Fatalf("web was not promoted to socklb:\n%s", logs)
	}
	before, hookBefore := userspaceConnections(t, lab.Node), socketLBConnections(t, lab.Node)
	n := flow.count()
	flow.waitFor(t, n+30)
	after, hookAfter := userspaceConnections(t, lab.Node), socketLBConnections(t, lab.Node)
	t.Logf("over %d connects from the cgroup after the promotion: userspace counted web %v then %v, the socket LB %v then %v",
		flow.count()-n, before, after, hookBefore, hookAfter)
	if after-before > 1 { // one may have been in flight through the portal as it went
		t.Errorf("after the promotion the userspace proxier still counted %v of web's connections: the hook should take them", after-before)
	}
	if hookAfter-hookBefore < 29 { // the flow's count may have been read a connect ahead of the metric
		t.Errorf("the socket LB counted %v of web's connections over 30 connects through it, want them all", hookAfter-hookBefore)
	}
	if err := offloadtest.EchoLine(long, "still here"); err != nil {
		t.Errorf("the connection opened in userspace, after the promotion: %v", err)
	}

	// Quiet: 2 connects a second, below --promote-conn-rate 10, and the
	// socket LB's counter is what tells hybrid so.
	flow.pace(t, 500*time.Millisecond)
	if !logs.waitFor("service port demoted", "port=default/web:p", "ipFamily=IPv4") {
		t.Fatalf("web was not demoted from socklb:\n%s", logs)
	}
	before = userspaceConnections(t, lab.Node)
	flow.waitFor(t, flow.count()+3)
	after = userspaceConnections(t, lab.Node)
	dials := flow.stop(t)
	failed := 0
	for _, d := range dials {
		if d.err != "" {
			failed++
			t.Logf("failed: %+v", d)
		}
	}
	t.Logf("%d connects from the cgroup across the promotion and the demotion, %d failed; after the demotion userspace counted web %v then %v",
		len(dials), failed, before, after)
	if failed > 0 {
		t.Errorf("%d of %d connects failed across the promotion and the demotion", failed, len(dials))
	}
	if after-before < 2 { // 3 connects after the demotion; the first may have been on its way
		t.Errorf("after the demotion the userspace proxier counted %v of web's 3 connections, want them back in userspace", after-before)
	}

	// Another mode on the same node: the socket LB stays pinned after hybrid
	// stops (its programs attached; web's element went with the demotion),
	// and nftables mode removes it rather than leave it rewriting connect()
	// from maps nobody updates.
	long.Close() // or hybrid's shutdown would give it --shutdown-grace
	stop()
	logs = startSvcproxy(t, lab.Node, "--mode", "nftables", "--socklb-pin-path", pin,
		"--services", file, "--hostname-override", "node-a", "--cluster-cidr", "198.19.8.0/21,2001:db8:19::/64",
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249")
	if !logs.waitFor("removed the socket LB an earlier svcproxy pinned", "mode=nftables") {
		t.Fatalf("nftables mode did not remove the pinned socket LB:\n%s", logs)
	}
	checkDetached(t, cg, pin)
	// web was in userspace when hybrid stopped, so no rule of its stayed: a
	// connect is refused until nftables mode's first sync.
	deadline = time.Now().Add(30 * time.Second)
	for d := dialFromCgroup(t, lab.Client, cg, vip, 1)[0]; d.err != "" || d.backend == ""; d = dialFromCgroup(t, lab.Client, cg, vip, 1)[0] {
		if time.Now().After(deadline) {
			t.Fatalf("in nftables mode, connect from the cgroup: %+v after 30s, want a backend through nftables\n%s", d, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// userspaceConnections is svcproxy_userspace_connections_total of web's IPv4
// side, from the node's /metrics.
func userspaceConnections(t *testing.T, ns *netnstest.NS) float64 {
	t.Helper()
	return webIPv4Metric(t, ns, "svcproxy_userspace_connections_total")
}

// socketLBConnections is svcproxy_socklb_port_connections_total of web's
// IPv4 side (the socket LB's translations), while web is in the maps.
func socketLBConnections(t *testing.T, ns *netnstest.NS) float64 {
	t.Helper()
	return webIPv4Metric(t, ns, "svcproxy_socklb_port_connections_total")
}

// webIPv4Metric is the value of metric name for web's IPv4 side, from the
// node's /metrics.
func webIPv4Metric(t *testing.T, ns *netnstest.NS, name string) float64 {
	t.Helper()
	body, err := getIn(ns, "127.0.0.1:10249", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := metricValue(fams[name], map[string]string{"ip_family": "IPv4", "service_port": "default/web:p"})
	if !ok {
		t.Fatalf("/metrics has no %s for web's IPv4 side:\n%s", name, body)
	}
	return v
}
