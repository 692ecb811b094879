package guest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/kernel/link"
	"github.com/svcproxy/svcproxy/offload/ipvs"
)

// svcproxyBin is where test/vm puts the svcproxy binary in the guest.
const svcproxyBin = "/bin/svcproxy"

// manifests is default/web, ClusterIP 198.18.0.30:80 over the three backends.
const manifests = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 198.18.0.30
  clusterIPs: [198.18.0.30]
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [198.19.1.2], conditions: {ready: true}}
- {addresses: [198.19.1.3], conditions: {ready: true}}
- {addresses: [198.19.1.4], conditions: {ready: true}}
`

// TestSvcproxy runs the whole svcproxy binary in --mode ipvs in the director with a
// manifests file: real TCP from the client namespace reaches the ClusterIP, spread
// round-robin, masqueraded (the client is outside --cluster-cidr); the node reaches
// it too. Then svcproxy --cleanup leaves no virtual server, interface, rule or set.
func TestSvcproxy(t *testing.T) {
	if _, err := os.Stat(svcproxyBin); err != nil {
		t.Skipf("needs %s (test/vm puts it in the guest): %v", svcproxyBin, err)
	}
	l := newLab(t)
	vip := netip.MustParseAddrPort("198.18.0.30:80")

	signal, _ := l.serve(t, manifests, "--mode", "ipvs", "--node-ip", nodeIP.String(),
		"--hostname-override", "node-a", "--cluster-cidr", "198.19.1.0/24")
	if mode := l.get(t, "127.0.0.1:10249", "/proxyMode"); strings.TrimSpace(mode) != "ipvs" {
		t.Errorf("/proxyMode = %q, want ipvs", mode)
	}

	got := map[string]int{}
	peers := map[string]int{}
	for range 9 {
		c := l.dial(t, clientIPs[0], vip)
		got[c.backend]++
		peers[c.peer]++
		c.Close()
	}
	logSpread(t, "svcproxy --mode ipvs rr", got)
	logSpread(t, "svcproxy --mode ipvs: sources the backends saw", peers)
	wantSpread(t, got, 3, 3, 3)
	// From outside --cluster-cidr: the backends see the node's address on their link.
	if peers["198.19.1.1"] != 9 {
		t.Errorf("sources seen by the backends: %v, want 198.19.1.1 (masqueraded) for all 9", peers)
	}
	// The node itself: the ClusterIP is on the dummy interface, IPVS takes it in OUTPUT.
	c := dialFrom(t, l.director, netip.Addr{}, vip)
	c.echo(t)
	t.Logf("svcproxy: from the node to %s: backend %s saw source %s", vip, c.backend, c.peer)
	c.Close()
	nat := l.director.output(t, "iptables-save", "-t", "nat")
	sets := l.director.output(t, "ipset", "save")
	if !strings.Contains(nat, ipvs.SetClusterIPs) || !strings.Contains(sets, "add "+ipvs.SetClusterIPs+" 198.18.0.30,tcp:80") {
		t.Errorf("while running: want the masquerade rules and set member:\n%s\n%s", nat, sets)
	}
	signal(syscall.SIGTERM)

	out := l.director.output(t, svcproxyBin, "--cleanup")
	t.Logf("svcproxy --cleanup: %s", strings.TrimSpace(out))
	vss, err := l.ipvs.VirtualServers(context.Background())
	must(t, err)
	if len(vss) != 0 {
		t.Errorf("after --cleanup: virtual servers %v, want none", vss)
	}
	if _, err := l.links.Addresses(context.Background(), ipvs.DefaultInterface); !errors.Is(err, link.ErrNotExist) {
		t.Errorf("after --cleanup: %s: %v, want it gone", ipvs.DefaultInterface, err)
	}
	if nat := l.director.output(t, "iptables-save", "-t", "nat"); strings.Contains(nat, "SVCP-") {
		t.Errorf("after --cleanup, nat rules left:\n%s", nat)
	}
	if sets := l.director.output(t, "ipset", "list", "-n"); strings.TrimSpace(sets) != "" {
		t.Errorf("after --cleanup, ip sets left: %s", sets)
	}
	t.Logf("svcproxy --cleanup: no virtual servers, no %s, no SVCP- rules, no ip sets", ipvs.DefaultInterface)
}

// serve writes manifests to services.yaml and starts svcproxy on it in the
// director (--services) with args and its health and metrics servers on the
// director's loopback, where get and request reach them, and returns once
// its first sync is done (/healthz): the signal to stop it by
// (startSvcproxySignal), and the arguments it was started with, for a test
// that starts it again.
func (l *lab) serve(t *testing.T, manifests string, args ...string) (signal func(syscall.Signal), argv []string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "services.yaml")
	must(t, os.WriteFile(file, []byte(manifests), 0o644))
	argv = append([]string{"--services", file,
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249"}, args...)
	signal = l.startSvcproxySignal(t, argv...)
	l.waitHealthy(t)
	return signal, argv
}

// startSvcproxySignal starts svcproxy in the director, its log going to the
// test log, and returns the signal to stop it by: after SIGTERM svcproxy
// must exit cleanly; after SIGKILL nothing is checked.
func (l *lab) startSvcproxySignal(t *testing.T, args ...string) (signal func(syscall.Signal)) {
	t.Helper()
	cmd := exec.Command(svcproxyBin, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var logs sync.WaitGroup
	logs.Add(1)
	go func() { // svcproxy's log, line by line, until the pipe closes
		defer logs.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			t.Log("svcproxy| " + sc.Text())
		}
	}()
	// Started from the director's thread, the process is in the director's namespace.
	l.director.do(t, cmd.Start)
	var once sync.Once
	signal = func(sig syscall.Signal) {
		once.Do(func() {
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			pw.Close()
			logs.Wait()
			if err != nil && sig == syscall.SIGTERM {
				t.Errorf("svcproxy exited: %v", err)
			}
		})
	}
	t.Cleanup(func() { signal(syscall.SIGKILL) }) // the test ended early: no verdict on the exit
	return signal
}

// waitHealthy polls /healthz until the first sync is done (svcproxy's readiness
// signal) or 90 s pass: a dual-stack node's first sync is two (IPv4, then
// IPv6), each a few iptables, ip6tables and ipset runs, seconds apiece under
// TCG on a loaded host.
func (l *lab) waitHealthy(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		status, body, err := l.request("127.0.0.1:10256", "/healthz")
		if err == nil && status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("svcproxy not healthy after 90s: %d %s %v", status, body, err)
		}
		time.Sleep(200 * time.Millisecond) // polling a readiness endpoint
	}
}

func (l *lab) get(t *testing.T, addr, path string) string {
	t.Helper()
	status, body, err := l.request(addr, path)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET %s%s: %d %s %v", addr, path, status, body, err)
	}
	return body
}

// request makes one HTTP GET in the director: the socket is made on its thread
// (http.Client would dial from a goroutine of its own, in the wrong namespace).
func (l *lab) request(addr, path string) (int, string, error) {
	var c net.Conn
	done := make(chan error)
	l.director.work <- func() {
		var err error
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		done <- err
	}
	if err := <-done; err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// output runs a command in the namespace and returns its combined output.
func (n *netNS) output(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	n.do(t, func() error {
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, b.String())
		}
		return nil
	})
	return b.String()
}
