package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
)

// localhostManifests: web, a dual-stack TCP NodePort with the lab's three
// backends on this node; remote, externalTrafficPolicy Local with its one
// endpoint on another node; local, the same with b1 on this node and b2 on
// another; dns, a dual-stack UDP NodePort; clash, a NodePort whose port something else
// holds on 127.0.0.1.
var localhostManifests = func() string {
	var b strings.Builder
	svc := func(name, proto string, nodePort int, extra string) {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: %s, namespace: default}
spec:
  type: NodePort
  %s
  ports: [{name: p, port: 80, targetPort: 8080, nodePort: %d, protocol: %s}]
`, name, extra, nodePort, proto)
	}
	slice := func(svcName, family, proto, node string, addrs ...string) {
		fmt.Fprintf(&b, `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %s-%s, namespace: default, labels: {kubernetes.io/service-name: %s}}
addressType: %s
ports: [{name: p, port: 8080, protocol: %s}]
endpoints:
`, svcName, strings.ToLower(family), svcName, family, proto)
		for _, a := range addrs {
			fmt.Fprintf(&b, "- {addresses: [%q], nodeName: %s, conditions: {ready: true}}\n", a, node)
		}
	}
	var v4, v6 []string
	for i := range 3 {
		v4 = append(v4, offloadtest.BackendAddr(i).String())
		v6 = append(v6, offloadtest.BackendAddr6(i).String())
	}
	svc("web", "TCP", 30080, `ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: 198.18.0.10
  clusterIPs: [198.18.0.10, "2001:db8:18::10"]`)
	slice("web", "IPv4", "TCP", "node-a", v4...)
	slice("web", "IPv6", "TCP", "node-a", v6...)
	svc("remote", "TCP", 30081, "clusterIP: 198.18.0.11\n  externalTrafficPolicy: Local")
	slice("remote", "IPv4", "TCP", "node-b", v4[0])
	svc("local", "TCP", 30083, "clusterIP: 198.18.0.14\n  externalTrafficPolicy: Local")
	slice("local", "IPv4", "TCP", "node-a", v4[1])
	fmt.Fprintf(&b, "- {addresses: [%q], nodeName: node-b, conditions: {ready: true}}\n", v4[2])
	svc("dns", "UDP", 30053, `ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: 198.18.0.12
  clusterIPs: [198.18.0.12, "2001:db8:18::12"]`)
	slice("dns", "IPv4", "UDP", "node-a", v4...)
	slice("dns", "IPv6", "UDP", "node-a", v6...)
	svc("clash", "TCP", 30082, "clusterIP: 198.18.0.13")
	slice("clash", "IPv4", "TCP", "node-a", v4...)
	return b.String()
}()

// TestLocalhostNodePorts runs svcproxy in nftables mode with
// --nodeport-addresses primary,localhost on the real kernel (KEP-6032): from
// the node's own namespace 127.0.0.1:<nodePort> and [::1]:<nodePort> answer
// through the localhost listeners while the node's address answers through
// the table; a Local NodePort with no endpoint here is refused; a node port
// taken on loopback is skipped with a log line; UDP on loopback is rejected
// and counted, in both families; the listener metrics are kube-proxy's.
func TestLocalhostNodePorts(t *testing.T) {
	netnstest.RequireRoot(t, "nft", "ip", "iptables-restore")
	if err := knft.Available(); err != nil {
		t.Skipf("nftables mode unavailable: %v", err)
	}
	lab := offloadtest.New(t, "node-a")
	lab.AddIPv6(t)
	lab.ServeTCP(t, 8080)
	lab.ServeUDP(t, 8080)
	var taken net.Listener
	if err := lab.Node.Do(func() (err error) { taken, err = net.Listen("tcp4", "127.0.0.1:30082"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })

	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(localhostManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := startSvcproxy(t, lab.Node, "--mode", "nftables", "--services", file, "--hostname-override", "node-a",
		"--node-ip", "198.19.10.1,2001:db8:19::10:1", "--nodeport-addresses", "primary,localhost",
		"--cluster-cidr", "198.19.8.0/21,2001:db8:19::/64",
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249")

	for _, dst := range []string{"127.0.0.1:30080", "[::1]:30080"} {
		answers := waitAnswers(t, lab.Node, dst)
		t.Logf("%s from the node: %v", dst, answers)
	}
	if _, err := offloadtest.Dial(lab.Client, "198.19.10.1:30080", 3); err != nil {
		t.Errorf("the node's address from the client (the table): %v", err)
	}
	if a, err := offloadtest.Dial(lab.Node, "127.0.0.1:30083", 4); err != nil {
		t.Errorf("policy Local: %v", err)
	} else {
		for _, x := range a {
			if x.Backend != "b1" {
				t.Errorf("policy Local from the node: answers %v, want b1 (the endpoint on this node) only", a)
				break
			}
		}
	}
	if _, err := offloadtest.Dial(lab.Node, "127.0.0.1:30081", 1); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("policy Local, no endpoint on this node: %v, want connection refused", err)
	}
	if !logs.waitFor("localhost NodePort skipped", "default/clash:p") {
		t.Errorf("no log line for the taken node port 30082:\n%s", logs)
	}
	for _, dst := range []string{"127.0.0.1:30053", "[::1]:30053"} {
		if err := udpRefused(lab.Node, dst); err != nil {
			t.Error(err)
		}
	}

	if strings.Contains(logs.String(), "object skipped") {
		t.Errorf("svcproxy skipped part of the manifests:\n%s", logs)
	}
	body, err := getIn(lab.Node, "127.0.0.1:10249", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
		want   string
	}{
		{"kubeproxy_nftables_localhost_nodeport_listeners", map[string]string{"ip_family": "IPv4"}, func(v float64) bool { return v == 2 }, "2 (web, local; remote has no local endpoint, clash is taken)"},
		{"kubeproxy_nftables_localhost_nodeport_listeners", map[string]string{"ip_family": "IPv6"}, func(v float64) bool { return v == 1 }, "1 (web)"},
		{"kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total", map[string]string{"ip_family": "IPv4"}, func(v float64) bool { return v >= 1 }, ">= 1 (clash)"},
		{"kubeproxy_nftables_localhost_nodeport_rejected_packets_total", map[string]string{"ip_family": "IPv4", "protocol": "UDP"}, func(v float64) bool { return v >= 1 }, ">= 1 (the datagram to dns)"},
		{"kubeproxy_nftables_localhost_nodeport_rejected_packets_total", map[string]string{"ip_family": "IPv6", "protocol": "UDP"}, func(v float64) bool { return v >= 1 }, ">= 1 (the datagram to dns)"},
	} {
		v, ok := metricValue(fams[m.name], m.labels)
		if !ok || !m.ok(v) {
			t.Errorf("%s%v = %v (found %v), want %s", m.name, m.labels, v, ok, m.want)
		}
	}
}

// startSvcproxy runs the test binary as svcproxy (TestHelperSvcproxy) in ns
// with args until the test ends, and returns its log.
func startSvcproxy(t *testing.T, ns *netnstest.NS, args ...string) *logLines {
	t.Helper()
	l, _ := startSvcproxyStoppable(t, ns, args...)
	return l
}

// startSvcproxyStoppable is startSvcproxy that also returns stop: SIGTERM,
// then wait for the process to exit (at once, or at the end of the test).
func startSvcproxyStoppable(t *testing.T, ns *netnstest.NS, args ...string) (*logLines, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := helperCommand(ctx, ns, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &logLines{changed: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			l.add(sc.Text())
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			<-done // the log is read to its end before Wait closes the pipe
			cmd.Wait()
			cancel()
			t.Logf("svcproxy %s log:\n%s", strings.Join(args, " "), l)
		})
	}
	t.Cleanup(stop)
	return l, stop
}

// logLines is a process's log as it comes.
type logLines struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

func (l *logLines) add(line string) {
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// waitFor reports whether a line holding every one of parts comes within a
// generous deadline.
func (l *logLines) waitFor(parts ...string) bool {
	deadline := time.After(30 * time.Second)
	for {
		l.mu.Lock()
		for _, line := range l.lines {
			if containsAll(line, parts) {
				l.mu.Unlock()
				return true
			}
		}
		l.mu.Unlock()
		select {
		case <-l.changed:
		case <-deadline:
			return false
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// waitAnswers dials dst from ns until it answers (svcproxy's first sync is
// the readiness signal), then returns three answers.
func waitAnswers(t *testing.T, ns *netnstest.NS, dst string) []offloadtest.Answer {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		a, err := offloadtest.Dial(ns, dst, 3)
		if err == nil {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered: %v", dst, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// udpRefused sends a datagram from ns to dst and expects the ICMP port
// unreachable of a reject (read as connection refused).
func udpRefused(ns *netnstest.NS, dst string) error {
	return ns.Do(func() error {
		c, err := net.Dial("udp", dst)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("who")); err != nil {
			return err
		}
		_, err = c.Read(make([]byte, 64))
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("UDP %s from the node: %v, want connection refused", dst, err)
		}
		return nil
	})
}

// metricValue is the value of the sample of f whose labels include labels.
func metricValue(f *dto.MetricFamily, labels map[string]string) (float64, bool) {
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		match := 0
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
				match++
			}
		}
		if match != len(labels) {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}
