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
// the maps before its portal goes. Across the promotion no connect fails;
// after it, the cgroup's connects no longer reach the userspace proxier (its
// connection counter for web stands still while they go on and are
// answered), and the connection opened in userspace still echoes. Then
// nftables mode, started on the same node after hybrid, removes the socket
// LB hybrid left pinned (web's element in it): no program stays attached.
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
		"--socklb-cgroup", cg.path, "--socklb-pin-path", pin,
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
	before := userspaceConnections(t, lab.Node)
	n := flow.count()
	flow.waitFor(t, n+30)
	after := userspaceConnections(t, lab.Node)
	dials := flow.stop(t)
	failed := 0
	for _, d := range dials {
		if d.err != "" {
			failed++
			t.Logf("failed: %+v", d)
		}
	}
	t.Logf("%d connects from the cgroup across the promotion, %d failed; userspace counted web %v then %v over the last %d", len(dials), failed, before, after, len(dials)-n)
	if failed > 0 {
		t.Errorf("%d of %d connects failed across the promotion", failed, len(dials))
	}
	if after-before > 1 { // one may have been in flight through the portal as it went
		t.Errorf("after the promotion the userspace proxier still counted %v of web's connections: the hook should take them", after-before)
	}
	if err := offloadtest.EchoLine(long, "still here"); err != nil {
		t.Errorf("the connection opened in userspace, after the promotion: %v", err)
	}

	// Another mode on the same node: web's element stays pinned after hybrid
	// stops, and nftables mode removes the socket LB rather than leave it
	// rewriting connect() from maps nobody updates.
	long.Close() // or hybrid's shutdown would give it --shutdown-grace
	stop()
	logs = startSvcproxy(t, lab.Node, "--mode", "nftables", "--socklb-pin-path", pin,
		"--services", file, "--hostname-override", "node-a", "--cluster-cidr", "198.19.8.0/21,2001:db8:19::/64",
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249")
	if !logs.waitFor("removed the socket LB an earlier svcproxy pinned", "mode=nftables") {
		t.Fatalf("nftables mode did not remove the pinned socket LB:\n%s", logs)
	}
	checkDetached(t, cg, pin)
	if d := dialFromCgroup(t, lab.Client, cg, vip, 1)[0]; d.err != "" || d.backend == "" {
		t.Errorf("in nftables mode, connect from the cgroup: %+v, want a backend through nftables", d)
	}
}

// userspaceConnections is svcproxy_userspace_connections_total of web's IPv4
// side, from the node's /metrics.
func userspaceConnections(t *testing.T, ns *netnstest.NS) float64 {
	t.Helper()
	body, err := fallbackGet(ns, "127.0.0.1:10249", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := metricValue(fams["svcproxy_userspace_connections_total"], map[string]string{"ip_family": "IPv4", "service_port": "default/web:p"})
	if !ok {
		t.Fatalf("/metrics has no svcproxy_userspace_connections_total for web's IPv4 side:\n%s", body)
	}
	return v
}
