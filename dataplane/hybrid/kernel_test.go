package hybrid_test

import (
	"bufio"
	"context"
	"encoding/json"
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
	"sync/atomic"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/testbin"
)

// The hybrid topology: a client and a backend namespace, each joined to the node
// namespace (where svcproxy runs and routes between them) by a veth pair.
var (
	hybridClient  = netip.MustParsePrefix("198.19.1.2/24")
	hybridNodeC   = netip.MustParsePrefix("198.19.1.1/24")
	hybridBackend = netip.MustParsePrefix("198.19.2.2/24")
	hybridNodeB   = netip.MustParsePrefix("198.19.2.1/24")
)

const (
	hotVIP  = "198.18.0.10:80" // default/web:http, driven hot
	coldVIP = "198.18.0.11:80" // default/cold:http, a few connections only
)

const hybridManifests = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 198.18.0.10
  ports: [{name: http, port: 80, protocol: TCP, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: cold, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 198.18.0.11
  ports: [{name: http, port: 80, protocol: TCP, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [198.19.2.2], conditions: {ready: true}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: cold-1, namespace: default, labels: {kubernetes.io/service-name: cold}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [198.19.2.2], conditions: {ready: true}}]
`

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// TestHybridPromotion drives one service port hot and watches it move to the
// kernel and back, live: in userspace its backend sees the node's address, on
// the iptables path the client's; a connection opened before the promotion
// finishes after it; the port that stays cool keeps its portal throughout.
func TestHybridPromotion(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-save", "iptables-restore")
	e := newHybridEnv(t)
	e.startProxy(t, "--promote-conn-rate", "20", "--promote-after", "1s", "--demote-after", "2s")

	// A low rate: a few connections leave both ports in userspace.
	before := e.port(t, "default/web:http").Samples
	for _, vip := range []string{hotVIP, coldVIP, hotVIP} {
		c, peer := e.dial(t, vip)
		c.Close()
		if want := hybridNodeB.Addr().String(); peer != want {
			t.Fatalf("%s in userspace: backend saw %s, want the node's %s", vip, peer, want)
		}
	}
	e.waitPort(t, "default/web:http", "three more samples", func(p statusPort) bool { return p.Samples >= before+3 })
	if p := e.port(t, "default/web:http"); p.Path != "userspace" {
		t.Fatalf("web after 3 connections: path %s, want userspace", p.Path)
	}

	// A connection opened in userspace, to finish after the promotion.
	long, peer := e.dial(t, hotVIP)
	defer long.Close()
	if peer != hybridNodeB.Addr().String() {
		t.Fatalf("long connection: backend saw %s, want the node's address", peer)
	}

	b := startBurst(t, e.client, hotVIP, 10*time.Millisecond) // ~100/s

	e.waitPort(t, "default/web:http", "promoted to iptables", func(p statusPort) bool { return p.Path == "iptables" })
	save := e.node.Run(t, "iptables-save", "-t", "nat")
	if !strings.Contains(save, ":SVCP-SVC-") || strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32") {
		t.Errorf("promoted web: want its SVCP-SVC- chain and no portal:\n%s", save)
	}
	if !strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.11/32") {
		t.Errorf("cold lost its portal:\n%s", save)
	}
	c, peer := e.dial(t, hotVIP)
	c.Close()
	if want := hybridClient.Addr().String(); peer != want {
		t.Errorf("web on iptables: backend saw %s, want the client's %s", peer, want)
	}
	c, peer = e.dial(t, coldVIP)
	c.Close()
	if want := hybridNodeB.Addr().String(); peer != want {
		t.Errorf("cold: backend saw %s, want the node's %s", peer, want)
	}
	// The kernel's counters are read: the burst shows as a rate on the iptables path.
	e.waitPort(t, "default/web:http", "a kernel rate", func(p statusPort) bool { return p.Path == "iptables" && p.Rate > 0 })
	echo(t, long, "still here")
	long.Close()

	ok, failed, lastErr := b.stop()
	t.Logf("burst: %d connections, %d failed", ok, failed)
	if failed > 0 {
		t.Errorf("burst: %d of %d connections failed across the promotion; last: %v", failed, ok+failed, lastErr)
	}

	// A trickle, well below the rate, goes on across the demotion.
	trickle := startBurst(t, e.client, hotVIP, 200*time.Millisecond) // ~5/s
	e.waitPort(t, "default/web:http", "demoted to userspace", func(p statusPort) bool { return p.Path == "userspace" })
	ok, failed, lastErr = trickle.stop()
	t.Logf("trickle: %d connections, %d failed", ok, failed)
	if failed > 0 {
		t.Errorf("trickle: %d of %d connections failed across the demotion; last: %v", failed, ok+failed, lastErr)
	}
	save = e.node.Run(t, "iptables-save", "-t", "nat")
	if strings.Contains(save, ":SVCP-SVC-") || !strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32") {
		t.Errorf("demoted web: want its portal back and no SVCP-SVC- chain:\n%s", save)
	}
	c, peer = e.dial(t, hotVIP)
	c.Close()
	if want := hybridNodeB.Addr().String(); peer != want {
		t.Errorf("web back in userspace: backend saw %s, want the node's %s", peer, want)
	}
	metrics := e.get(t, "/metrics")
	for _, m := range []string{`svcproxy_hybrid_promotions_total{offload="iptables"}`, `svcproxy_hybrid_demotions_total{offload="iptables"}`} {
		if !strings.Contains(metrics, m+" ") || strings.Contains(metrics, m+" 0\n") {
			t.Errorf("/metrics: want %s at least 1:\n%s", m, metrics)
		}
	}
	e.logMoves(t)
}

// hybridEnv is the topology and the svcproxy running in it.
type hybridEnv struct {
	node, client, backend *netnstest.NS
	dir                   string
	http                  *http.Client
	proxy                 *exec.Cmd // the svcproxy process
}

func newHybridEnv(t *testing.T) *hybridEnv {
	t.Helper()
	e := &hybridEnv{node: netnstest.New(t), client: netnstest.New(t), backend: netnstest.New(t), dir: t.TempDir()}
	netnstest.Veth(t, e.client, "eth0", hybridClient, e.node, "c0", hybridNodeC)
	netnstest.Veth(t, e.backend, "eth0", hybridBackend, e.node, "b0", hybridNodeB)
	e.client.Run(t, "ip", "route", "add", "198.18.0.0/16", "via", hybridNodeC.Addr().String())
	e.backend.Run(t, "ip", "route", "add", "198.19.0.0/16", "via", hybridNodeB.Addr().String())
	e.node.Sysctl(t, "net.ipv4.ip_forward", "1")
	startPeerServer(t, e.backend, netip.AddrPortFrom(hybridBackend.Addr(), 8080))
	e.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = e.node.Do(func() error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	return e
}

// startProxy runs svcproxy --mode hybrid in the node namespace and waits for
// its first sync.
func (e *hybridEnv) startProxy(t *testing.T, flags ...string) {
	t.Helper()
	manifests := filepath.Join(e.dir, "services.yaml")
	if err := os.WriteFile(manifests, []byte(hybridManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--mode", "hybrid", "--offload", "iptables", "--services", manifests,
		"--node-ip", hybridNodeC.Addr().String(),
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249"}
	e.proxy = e.start(t, append(args, flags...)...)
	e.waitHealthy(t)
	e.waitPort(t, "default/web:http", "sampled", func(p statusPort) bool { return p.Samples > 0 })
}

// start runs the svcproxy binary in the node namespace, its log appended to
// svcproxy.log; it is killed at the end of the test if it still runs.
func (e *hybridEnv) start(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(testbin.Build(t, "./cmd/svcproxy"), "svcproxy")
	log, err := os.OpenFile(filepath.Join(e.dir, "svcproxy.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := e.node.Command(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(e.dir, "svcproxy.log"))
			t.Logf("svcproxy log:\n%s", b)
		}
	})
	return cmd
}

// waitHealthy polls /healthz until it answers 200: svcproxy's readiness signal.
func (e *hybridEnv) waitHealthy(t *testing.T) {
	t.Helper()
	waitFor(t, "svcproxy healthy", func() (bool, string) {
		resp, err := e.http.Get("http://127.0.0.1:10256/healthz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK, string(b)
	})
}

func (e *hybridEnv) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := e.http.Get("http://127.0.0.1:10249" + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return string(b)
}

// statusPort is a port of hybrid's /status.
type statusPort struct {
	Name    string  `json:"name"`
	Path    string  `json:"path"`
	Rate    float64 `json:"rate"`
	Samples uint64  `json:"samples"`
}

func (e *hybridEnv) port(t *testing.T, name string) statusPort {
	t.Helper()
	p, err := e.tryPort(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *hybridEnv) tryPort(name string) (statusPort, error) {
	resp, err := e.http.Get("http://127.0.0.1:10249/status")
	if err != nil {
		return statusPort{}, err
	}
	defer resp.Body.Close()
	var st struct{ Ports []statusPort }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return statusPort{}, fmt.Errorf("/status: %w", err)
	}
	for _, p := range st.Ports {
		if p.Name == name {
			return p, nil
		}
	}
	return statusPort{}, fmt.Errorf("/status: no port %s", name)
}

func (e *hybridEnv) waitPort(t *testing.T, name, what string, cond func(statusPort) bool) {
	t.Helper()
	waitFor(t, name+" "+what, func() (bool, string) {
		p, err := e.tryPort(name)
		if err != nil {
			return false, err.Error()
		}
		return cond(p), fmt.Sprintf("%+v", p)
	})
}

// dial connects from the client namespace and returns the connection and the
// address the backend saw.
func (e *hybridEnv) dial(t *testing.T, vip string) (net.Conn, string) {
	t.Helper()
	c, peer, err := dialPeer(e.client, vip)
	if err != nil {
		t.Fatalf("connect to %s: %v", vip, err)
	}
	return c, peer
}

// logMoves shows svcproxy's promotion and demotion lines.
func (e *hybridEnv) logMoves(t *testing.T) {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(e.dir, "svcproxy.log"))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "promoted") || strings.Contains(l, "demoted") {
			t.Log(l)
		}
	}
}

// dialPeer connects to vip from ns and reads the backend's first line: the
// address it saw the connection come from.
func dialPeer(ns *netnstest.NS, vip string) (net.Conn, string, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", vip, 10*time.Second)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	peer, err := readPeer(c)
	if err != nil {
		c.Close()
		return nil, "", err
	}
	return c, peer, nil
}

func readPeer(c net.Conn) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read the peer line: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	return strings.TrimSpace(line), nil
}

// echo writes msg on c and expects it back.
func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		t.Fatalf("write on the long connection: %v", err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || strings.TrimSpace(got) != msg {
		t.Fatalf("long connection after the promotion: read %q, %v; want %q", got, err, msg)
	}
}

// startPeerServer serves TCP on addr in ns: each connection gets the client's
// address on a line, then its own lines back.
func startPeerServer(t *testing.T, ns *netnstest.NS, addr netip.AddrPort) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp4", addr.String()); return err }); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() { acceptPeers(ln, &wg, &mu, conns) })
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

func acceptPeers(ln net.Listener, wg *sync.WaitGroup, mu *sync.Mutex, conns map[net.Conn]bool) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		mu.Lock()
		conns[c] = true
		mu.Unlock()
		wg.Go(func() {
			defer func() { mu.Lock(); delete(conns, c); mu.Unlock(); c.Close() }()
			ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "%s\n", ap.Addr())
			_, _ = io.Copy(c, c)
		})
	}
}

// burst opens connections to a VIP from the client namespace, one per interval
// at most, each one read (the peer line) and closed, until stopped.
type burst struct {
	stopc      chan struct{}
	done       chan struct{}
	ok, failed atomic.Int64
	lastErr    atomic.Pointer[error]
}

func startBurst(t *testing.T, ns *netnstest.NS, vip string, every time.Duration) *burst {
	b := &burst{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() { // the burst: one locked thread in the client namespace
		defer close(b.done)
		_ = ns.Do(func() error { b.run(vip, every); return nil })
	}()
	t.Cleanup(func() { b.stop() })
	return b
}

func (b *burst) run(vip string, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-b.stopc:
			return
		case <-tick.C:
		}
		c, err := net.DialTimeout("tcp4", vip, 10*time.Second)
		if err == nil {
			_, err = readPeer(c)
			c.Close()
		}
		if err != nil {
			b.failed.Add(1)
			b.lastErr.Store(&err)
		} else {
			b.ok.Add(1)
		}
	}
}

// stop ends the burst and returns its tally; it may be called twice.
func (b *burst) stop() (ok, failed int64, lastErr error) {
	select {
	case <-b.stopc:
	default:
		close(b.stopc)
	}
	<-b.done
	if p := b.lastErr.Load(); p != nil {
		lastErr = *p
	}
	return b.ok.Load(), b.failed.Load(), lastErr
}

// waitFor polls cond until it holds, failing the test after a deadline generous
// enough for a loaded machine; it asserts nothing about timing.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not after 90s; last: %s", what, last)
}
