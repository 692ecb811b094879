package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
)

// socketLBManifests: web, a dual-stack ClusterIP Service (TCP and UDP port
// 80) with the lab's three backends in each family; empty, a ClusterIP Service without endpoints;
// sticky, web's IPv4 backends with ClientIP session affinity; local,
// internalTrafficPolicy Local with one endpoint on this node (b1) of three.
var socketLBManifests = socketLBManifestsWith(0, 1, 2)

// socketLBManifestsWith is socketLBManifests with web's IPv4 endpoints the
// lab's backends web4 only.
func socketLBManifestsWith(web4 ...int) string {
	var b strings.Builder
	b.WriteString(`apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: 198.18.0.10
  clusterIPs: [198.18.0.10, "2001:db8:18::10"]
  ports: [{name: p, port: 80, targetPort: 8080}, {name: u, port: 80, targetPort: 8080, protocol: UDP}]
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec:
  clusterIP: 198.18.0.20
  ports: [{name: p, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: sticky, namespace: default}
spec:
  clusterIP: 198.18.0.30
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}
  ports: [{name: p, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: local, namespace: default}
spec:
  clusterIP: 198.18.0.40
  internalTrafficPolicy: Local
  ports: [{name: p, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: local-ipv4, namespace: default, labels: {kubernetes.io/service-name: local}}
addressType: IPv4
ports: [{name: p, port: 8080, protocol: TCP}]
endpoints:
- {addresses: ["198.19.11.2"], nodeName: node-b, conditions: {ready: true}}
- {addresses: ["198.19.12.2"], nodeName: node-a, conditions: {ready: true}}
- {addresses: ["198.19.13.2"], nodeName: node-b, conditions: {ready: true}}
`)
	for _, fam := range []struct {
		svc, name string
		addr      func(int) string
	}{
		{"web", "IPv4", func(i int) string { return offloadtest.BackendAddr(i).String() }},
		{"web", "IPv6", func(i int) string { return offloadtest.BackendAddr6(i).String() }},
		{"sticky", "IPv4", func(i int) string { return offloadtest.BackendAddr(i).String() }},
	} {
		fmt.Fprintf(&b, `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %s-%s, namespace: default, labels: {kubernetes.io/service-name: %s}}
addressType: %s
ports: [{name: p, port: 8080, protocol: TCP}%s]
endpoints:
`, fam.svc, strings.ToLower(fam.name), fam.svc, fam.name, map[bool]string{true: ", {name: u, port: 8080, protocol: UDP}"}[fam.svc == "web"])
		for i := range 3 {
			if fam.svc == "web" && fam.name == "IPv4" && !slices.Contains(web4, i) {
				continue
			}
			fmt.Fprintf(&b, "- {addresses: [%q], nodeName: node-a, conditions: {ready: true}}\n", fam.addr(i))
		}
	}
	return b.String()
}

// TestSocketLBMode runs svcproxy --mode socklb on the real kernel: the lab's
// node namespace, and a cgroup v2 directory of the test's own (under a
// private cgroup2 mount) for the socket LB. The pod (the lab's client
// namespace) also holds web's ClusterIPs on its loopback with a listener that
// answers "vip", so a connect() the hook leaves alone never leaves the pod:
// only a translated one reaches a backend. A pod process in the cgroup
// reaches all three backends over IPv4 and IPv6, the backend sees the pod's
// own address, and getpeername() says the ClusterIP; unconnected UDP from
// the cgroup reaches all three backends, every answer from the ClusterIP; the same pod's process
// outside the cgroup reaches its own listener (untranslated); a Service with
// ClientIP affinity sends all the pod's connects to one backend, one with
// internalTrafficPolicy Local to this node's endpoint only; a Service
// without endpoints is refused from the cgroup (the nftables path beside
// rejects what the hook leaves alone); an endpoint change under traffic
// (web's IPv4 side down to one backend) fails no connect; the node's own
// process outside the cgroup reaches a backend through nftables. /status and
// /metrics show the port on the socklb path. A restart under traffic, with
// the maps and links pinned, fails and untranslates no connect. After
// svcproxy stops and --cleanup runs, no program is attached to the cgroup,
// no pin is left and no nftables table of svcproxy remains.
func TestSocketLBMode(t *testing.T) {
	netnstest.RequireRoot(t, "nft", "ip", "iptables-restore")
	if err := knft.Available(); err != nil {
		t.Skipf("nftables unavailable, and the socket LB needs it beside: %v", err)
	}
	cg := newTestCgroup(t)
	lab := offloadtest.New(t, "node-a")
	lab.AddIPv6(t)
	lab.ServeTCP(t, 8080)
	lab.ServeUDP(t, 8080)
	vips := []string{"198.18.0.10:80", "[2001:db8:18::10]:80"}
	for _, vip := range append(vips, "198.18.0.30:80", "198.18.0.40:80") { // and sticky's, local's
		a := netip.MustParseAddrPort(vip).Addr()
		lab.Client.AddAddr(t, "lo", netip.PrefixFrom(a, a.BitLen()))
		serveVIP(t, lab.Client, vip)
	}
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(socketLBManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	pin := filepath.Join(newTestBPFFS(t), "svcproxy")
	args := []string{"--mode", "socklb", "--socklb-cgroup", netnstest.HostPath(cg.path), "--socklb-pin-path", pin,
		"--services", file, "--hostname-override", "node-a", "--cluster-cidr", "198.19.8.0/21,2001:db8:19::/64",
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249"}
	logs, stop := startSvcproxyStoppable(t, lab.Node, args...)
	if !logs.waitFor("svcproxy starting", "mode=socklb") {
		t.Fatalf("svcproxy did not start in socklb mode:\n%s", logs)
	}

	backends := map[string]bool{"b0": true, "b1": true, "b2": true}
	for _, vip := range vips {
		// The first sync may still be running: wait for a translated connect().
		waitTranslated(t, lab.Client, cg, vip)
		// 60 connects miss one of 3 backends with probability 3*(2/3)^60, about 1e-10.
		dials := dialFromCgroup(t, lab.Client, cg, vip, 60)
		seen := map[string]int{}
		for _, d := range dials {
			if d.err != "" || !backends[d.backend] {
				t.Fatalf("inside the cgroup, connect(%s): %+v; want a backend's answer", vip, d)
			}
			if d.client != offloadtest.ClientAddr.String() && d.client != offloadtest.ClientAddr6.String() {
				t.Errorf("the backend saw client %s, want the pod's own address (no NAT)", d.client)
			}
			if d.peer != vip {
				t.Errorf("inside the cgroup, getpeername() after connect(%s) says %s, want the ClusterIP", vip, d.peer)
			}
			seen[d.backend]++
		}
		if len(seen) != 3 {
			t.Errorf("inside the cgroup, 60 connects to %s reached %v, want all three backends", vip, seen)
		}
		if d := dialFromCgroup(t, lab.Client, nil, vip, 1)[0]; d.backend != "vip" {
			t.Errorf("the pod's process outside the cgroup, connect(%s): %+v; want its own VIP listener (untranslated)", vip, d)
		}
		if d := dialFromCgroup(t, lab.Node, nil, vip, 1)[0]; !backends[d.backend] {
			t.Errorf("the node's process outside the cgroup, connect(%s): %+v; want a backend, through nftables", vip, d)
		}
	}
	// UDP, unconnected: each datagram from a new socket in the cgroup is
	// sent to a backend (sendmsg) and its answer comes from the ClusterIP
	// (recvmsg), over both families.
	for _, vip := range vips {
		seen := map[string]int{}
		for _, d := range dialUDPFromCgroup(t, lab.Client, cg, vip, 60) {
			if d.err != "" || !backends[d.backend] || d.peer != vip {
				t.Fatalf("UDP from the cgroup to %s: %+v; want a backend's answer from the ClusterIP", vip, d)
			}
			seen[d.backend]++
		}
		if len(seen) != 3 {
			t.Errorf("UDP from the cgroup: 60 sockets to %s reached %v, want all three backends", vip, seen)
		}
	}

	// internalTrafficPolicy Local: only this node's endpoint (b1, the
	// second backend; the other two are node-b's).
	for _, d := range dialFromCgroup(t, lab.Client, cg, "198.18.0.40:80", 10) {
		if d.err != "" || d.backend != "b1" {
			t.Fatalf("inside the cgroup, connect to local (internalTrafficPolicy Local): %+v; want b1, this node's endpoint, only", d)
		}
	}

	// ClientIP affinity: every connect of the pod (one network namespace,
	// the hook's affinity key) lands on one backend.
	sticky := map[string]int{}
	for _, d := range dialFromCgroup(t, lab.Client, cg, "198.18.0.30:80", 20) {
		if d.err != "" || !backends[d.backend] {
			t.Fatalf("inside the cgroup, connect to sticky: %+v; want a backend", d)
		}
		sticky[d.backend]++
	}
	if len(sticky) != 1 {
		t.Errorf("ClientIP affinity: 20 connects of one pod reached %v, want one backend", sticky)
	}
	if d := dialFromCgroup(t, lab.Client, cg, "198.18.0.20:80", 1)[0]; d.err != "refused" {
		t.Errorf("inside the cgroup, connect to a Service without endpoints: %+v, want refused", d)
	}

	status, err := getIn(lab.Node, "127.0.0.1:10249", "/status")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := getIn(lab.Node, "127.0.0.1:10249", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"path":"socklb"`, `"frontends":["198.18.0.10:80"]`, `"frontends":["[2001:db8:18::10]:80"]`} {
		if !strings.Contains(strings.Join(strings.Fields(status), ""), want) {
			t.Errorf("/status lacks %s:\n%s", want, status)
		}
	}
	if want := `svcproxy_socklb_port_backends{ip_family="IPv4",service_port="default/web:p"} 3`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}

	// An endpoint change under traffic: web's IPv4 side goes down to b2
	// while a pod process connects every 10 ms; one element is rewritten in
	// place, and no connect fails.
	change := startDialing(t, lab.Client, cg, vips[0])
	change.waitFor(t, 10)
	replaceFile(t, file, socketLBManifestsWith(2))
	waitOnly(t, lab.Client, cg, vips[0], "b2")
	change.waitFor(t, change.count()+10)
	checkFlow(t, "across the endpoint change", change.stop(t), backends)
	replaceFile(t, file, socketLBManifests)
	waitOnly(t, lab.Client, cg, vips[0], "b0", "b1", "b2")

	// A restart under traffic: a pod process in the cgroup connects every
	// 10 ms while svcproxy stops and starts again; the pinned programs and
	// maps translate throughout, and the new svcproxy adopts them.
	flow := startDialing(t, lab.Client, cg, vips[0])
	stop()
	flow.waitFor(t, flow.count()+20) // connects while no svcproxy runs
	logs, stop = startSvcproxyStoppable(t, lab.Node, args...)
	if !logs.waitFor("svcproxy starting", "mode=socklb") {
		t.Fatalf("svcproxy did not start again:\n%s", logs)
	}
	waitTranslated(t, lab.Client, cg, vips[0])
	flow.waitFor(t, flow.count()+20) // and after its first sync
	// It adopted the maps as they were: its first sync wrote no element.
	if status, err := getIn(lab.Node, "127.0.0.1:10249", "/status"); err != nil {
		t.Error(err)
	} else if n := strings.Count(strings.Join(strings.Fields(status), ""), `"sets":0,`); n != 2 {
		t.Errorf("after the restart, /status shows %d families whose maps' sync wrote no element, want 2 (adopted as they were):\n%s", n, status)
	}
	if untranslated := checkFlow(t, "across the restart", flow.stop(t), backends); untranslated > 0 {
		t.Errorf("across the restart, %d connects were not translated (reached the pod's own listener)", untranslated)
	}

	stop()
	cleanupLogs := lab.Node.Run(t, "env", "SVCPROXY_HELPER=1", os.Args[0], "-test.run=^TestHelperSvcproxy$", "--", "--cleanup", "--socklb-pin-path", pin)
	checkDetached(t, cg, pin)
	if out := lab.Node.Run(t, "nft", "list", "tables"); strings.Contains(out, "svcproxy") {
		t.Errorf("after --cleanup, nft list tables: %s\ncleanup log:\n%s", out, cleanupLogs)
	}
}

// waitTranslated waits until a connect() from cg to vip reaches a backend,
// not the pod's own VIP listener: the maps carry the Service.
func waitTranslated(t *testing.T, ns *netnstest.NS, cg *testCgroup, vip string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		d := dialFromCgroup(t, ns, cg, vip, 1)[0]
		if d.err == "" && d.backend != "vip" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect(%s) from the cgroup never translated: %+v", vip, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serveVIP listens on addr inside ns and answers "vip <client>" to every
// connection: what a connect() the hook leaves alone reaches.
func serveVIP(t *testing.T, ns *netnstest.NS, addr string) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed at cleanup
			}
			fmt.Fprintf(c, "vip %s\n", c.RemoteAddr().(*net.TCPAddr).IP)
			c.Close()
		}
	}()
}
