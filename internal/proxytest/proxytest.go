// Package proxytest runs the svcproxy binary in a topology of network
// namespaces for the real-kernel tests of the dataplanes: a client and a
// backend namespace, each joined by a veth pair to the node namespace, where
// svcproxy runs and routes between them. The backend answers each connection
// with the address it saw it come from, then echoes.
package proxytest

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

// The topology's addresses: each link has one of each IP family, the IPv6 ones
// in the documentation prefix 2001:db8:19::/64 (services: 2001:db8:18::/112).
var (
	ClientAddr  = netip.MustParsePrefix("198.19.1.2/24")
	NodeAddrC   = netip.MustParsePrefix("198.19.1.1/24")
	BackendAddr = netip.MustParsePrefix("198.19.2.2/24")
	NodeAddrB   = netip.MustParsePrefix("198.19.2.1/24")

	ClientAddr6  = netip.MustParsePrefix("2001:db8:19::1:2/112")
	NodeAddrC6   = netip.MustParsePrefix("2001:db8:19::1:1/112")
	BackendAddr6 = netip.MustParsePrefix("2001:db8:19::2:2/112")
	NodeAddrB6   = netip.MustParsePrefix("2001:db8:19::2:1/112")
)

// Env is the topology and the svcproxy running in it.
type Env struct {
	Node, Client, Backend *netnstest.NS
	Dir                   string       // the test's temporary directory: manifests, svcproxy.log
	HTTP                  *http.Client // dials inside the node namespace
	Proxy                 *exec.Cmd    // the svcproxy process last started
}

// New builds the topology; everything goes when the test ends.
func New(t *testing.T) *Env {
	t.Helper()
	e := &Env{Node: netnstest.New(t), Client: netnstest.New(t), Backend: netnstest.New(t), Dir: t.TempDir()}
	netnstest.Veth(t, e.Client, "eth0", ClientAddr, e.Node, "c0", NodeAddrC)
	netnstest.Veth(t, e.Backend, "eth0", BackendAddr, e.Node, "b0", NodeAddrB)
	e.Client.Run(t, "ip", "route", "add", "198.18.0.0/16", "via", NodeAddrC.Addr().String())
	e.Backend.Run(t, "ip", "route", "add", "198.19.0.0/16", "via", NodeAddrB.Addr().String())
	e.Node.Sysctl(t, "net.ipv4.ip_forward", "1")
	e.Node.AddAddr(t, "c0", NodeAddrC6)
	e.Client.AddAddr(t, "eth0", ClientAddr6)
	e.Node.AddAddr(t, "b0", NodeAddrB6)
	e.Backend.AddAddr(t, "eth0", BackendAddr6)
	e.Client.Run(t, "ip", "-6", "route", "add", "2001:db8:18::/112", "via", NodeAddrC6.Addr().String())
	e.Backend.Run(t, "ip", "-6", "route", "add", "2001:db8:19::/64", "via", NodeAddrB6.Addr().String())
	e.Node.Sysctl(t, "net.ipv6.conf.all.forwarding", "1")
	startPeerServer(t, e.Backend, netip.AddrPortFrom(BackendAddr.Addr(), 8080))
	startPeerServer(t, e.Backend, netip.AddrPortFrom(BackendAddr6.Addr(), 8080))
	e.HTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = e.Node.Do(func() error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	return e
}

// Start runs the svcproxy binary (built once per test binary by testbin) in the node namespace, its log appended to
// svcproxy.log; it is killed at the end of the test if it still runs.
func (e *Env) Start(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(testbin.Build(t, "./cmd/svcproxy"), "svcproxy")
	log, err := os.OpenFile(filepath.Join(e.Dir, "svcproxy.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := e.Node.Command(context.Background(), bin, args...)
	e.Proxy = cmd
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(e.Dir, "svcproxy.log"))
			t.Logf("svcproxy log:\n%s", b)
		}
	})
	return cmd
}

// Serve writes manifests to services.yaml in the test's directory and
// starts svcproxy on it (--services) with its health and metrics servers on
// the node's loopback, where HTTP reaches them (WaitHealthy, Get, Port), and
// flags; it returns once the first sync is done (/healthz). It returns the
// arguments svcproxy was started with, for a test that starts it again.
func (e *Env) Serve(t *testing.T, manifests string, flags ...string) []string {
	t.Helper()
	file := filepath.Join(e.Dir, "services.yaml")
	if err := os.WriteFile(file, []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--services", file,
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249"}, flags...)
	e.Start(t, args...)
	e.WaitHealthy(t)
	return args
}

// WaitHealthy polls /healthz until it answers 200: svcproxy's readiness signal.
func (e *Env) WaitHealthy(t *testing.T) {
	t.Helper()
	WaitFor(t, "svcproxy healthy", func() (bool, string) {
		resp, err := e.HTTP.Get("http://127.0.0.1:10256/healthz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK, string(b)
	})
}

func (e *Env) Get(t *testing.T, path string) string {
	t.Helper()
	resp, err := e.HTTP.Get("http://127.0.0.1:10249" + path)
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

// StatusPort is a port of hybrid's /status.
type StatusPort struct {
	Name    string  `json:"name"`
	Path    string  `json:"path"`
	Rate    float64 `json:"rate"`
	Samples uint64  `json:"samples"`
}

// Port is the IPv4 side of a hybrid port in /status.
func (e *Env) Port(t *testing.T, name string) StatusPort {
	t.Helper()
	p, err := e.TryPort(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TryPort is Port without failing the test.
func (e *Env) TryPort(name string) (StatusPort, error) { return e.TryFamilyPort("IPv4", name) }

// TryFamilyPort returns one IP family's side of a hybrid port: /status has a
// document per family ({"ipFamilies": [...], "IPv4": {...}, "IPv6": {...}}),
// and each family promotes its ports on its own.
func (e *Env) TryFamilyPort(family, name string) (StatusPort, error) {
	resp, err := e.HTTP.Get("http://127.0.0.1:10249/status")
	if err != nil {
		return StatusPort{}, err
	}
	defer resp.Body.Close()
	var st map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return StatusPort{}, fmt.Errorf("/status: %w", err)
	}
	var fam struct{ Ports []StatusPort }
	if err := json.Unmarshal(st[family], &fam); err != nil {
		return StatusPort{}, fmt.Errorf("/status: %s: %w", family, err)
	}
	for _, p := range fam.Ports {
		if p.Name == name {
			return p, nil
		}
	}
	return StatusPort{}, fmt.Errorf("/status: %s: no port %s", family, name)
}

// WaitPort waits until cond holds for the IPv4 side of a hybrid port.
func (e *Env) WaitPort(t *testing.T, name, what string, cond func(StatusPort) bool) {
	t.Helper()
	e.WaitFamilyPort(t, "IPv4", name, what, cond)
}

// WaitFamilyPort waits until cond holds for one family's side of a hybrid port.
func (e *Env) WaitFamilyPort(t *testing.T, family, name, what string, cond func(StatusPort) bool) {
	t.Helper()
	WaitFor(t, family+" "+name+" "+what, func() (bool, string) {
		p, err := e.TryFamilyPort(family, name)
		if err != nil {
			return false, err.Error()
		}
		return cond(p), fmt.Sprintf("%+v", p)
	})
}

// dial connects from the client namespace and returns the connection and the
// address the backend saw.
func (e *Env) Dial(t *testing.T, vip string) (net.Conn, string) {
	t.Helper()
	c, peer, err := dialPeer(e.Client, vip)
	if err != nil {
		t.Fatalf("connect to %s: %v", vip, err)
	}
	return c, peer
}

// logMoves shows svcproxy's promotion and demotion lines.
func (e *Env) LogMoves(t *testing.T) {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(e.Dir, "svcproxy.log"))
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
		c, err = net.DialTimeout("tcp", vip, 10*time.Second)
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
func Echo(t *testing.T, c net.Conn, msg string) {
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
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp", addr.String()); return err }); err != nil {
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
type Burst struct {
	stopc      chan struct{}
	done       chan struct{}
	ok, failed atomic.Int64
	lastErr    atomic.Pointer[error]
}

func StartBurst(t *testing.T, ns *netnstest.NS, vip string, every time.Duration) *Burst {
	b := &Burst{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() { // the burst: one locked thread in the client namespace
		defer close(b.done)
		_ = ns.Do(func() error { b.run(vip, every); return nil })
	}()
	t.Cleanup(func() { b.Stop() })
	return b
}

func (b *Burst) run(vip string, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-b.stopc:
			return
		case <-tick.C:
		}
		c, err := net.DialTimeout("tcp", vip, 10*time.Second)
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

// Check stops the burst, logs its tally, and fails the test (without
// stopping it) if a connection failed across what happened meanwhile
// ("the promotion"): what each hybrid move and restart promises.
func (b *Burst) Check(t *testing.T, name, across string) {
	t.Helper()
	ok, failed, lastErr := b.Stop()
	t.Logf("%s: %d connections, %d failed", name, ok, failed)
	if failed > 0 {
		t.Errorf("%s: %d of %d connections failed across %s; last: %v", name, failed, ok+failed, across, lastErr)
	}
}

// Total is the number of connections made so far, failed or not.
func (b *Burst) Total() int64 { return b.ok.Load() + b.failed.Load() }

// Stop ends the burst and returns its tally; it may be called twice.
func (b *Burst) Stop() (ok, failed int64, lastErr error) {
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
func WaitFor(t *testing.T, what string, cond func() (bool, string)) {
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
