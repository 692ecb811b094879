package guest

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
)

// restartManifests is manifests plus default/dns, a UDP Service on the first
// backend, for the conntrack entry a restart must leave alone.
const restartManifests = manifests + `---
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: default}
spec:
  clusterIP: 198.18.0.31
  ports: [{name: dns, port: 53, targetPort: 5353, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dns-1
  namespace: default
  labels: {kubernetes.io/service-name: dns}
addressType: IPv4
ports: [{name: dns, port: 5353, protocol: UDP}]
endpoints:
- {addresses: [198.19.1.2], conditions: {ready: true}}
`

var dnsVIP = netip.MustParseAddrPort("198.18.0.31:53")

// udpFlow is a UDP "connection" from the client to a VIP: one socket, so
// one conntrack entry in the director while it lasts.
type udpFlow struct {
	c   net.Conn
	src netip.AddrPort
}

// startUDPFlow serves UDP echo on the first backend and opens a flow from the
// client to vip that gets its echo. The director's UDP conntrack timeouts are
// raised to 10 minutes, so that the entry outlives a slow restart under TCG by
// itself: the test sends nothing across a restart, and an entry found after
// it is the one made before, not a new one.
func (l *lab) startUDPFlow(t *testing.T, vip netip.AddrPort) *udpFlow {
	t.Helper()
	l.director.sysctl(t, "net/netfilter/nf_conntrack_udp_timeout", "600")
	l.director.sysctl(t, "net/netfilter/nf_conntrack_udp_timeout_stream", "600")
	serveUDP(t, l.backend, netip.AddrPortFrom(backendIPs[0], 5353))
	f := l.dialUDP(t, vip)
	f.exchange(t)
	return f
}

// dialUDP opens a flow from the client to vip, without sending.
func (l *lab) dialUDP(t *testing.T, vip netip.AddrPort) *udpFlow {
	t.Helper()
	f := &udpFlow{}
	l.client.do(t, func() (err error) { f.c, err = net.Dial("udp4", vip.String()); return err })
	t.Cleanup(func() { f.c.Close() })
	f.src = netip.MustParseAddrPort(f.c.LocalAddr().String())
	return f
}

// exchange sends a datagram and waits for its echo.
func (f *udpFlow) exchange(t *testing.T) {
	t.Helper()
	buf := make([]byte, 64)
	for range 10 { // a datagram may be lost while the first sync is applied
		f.c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := f.c.Write([]byte("query")); err != nil {
			continue
		}
		if n, err := f.c.Read(buf); err == nil && string(buf[:n]) == "query" {
			return
		}
	}
	t.Fatalf("UDP flow %s -> %s: no echo in 10 tries", f.src, dnsVIP)
}

// hasEntry reports whether the director's conntrack table has f's entry.
func (l *lab) hasEntry(t *testing.T, f *udpFlow, vip netip.AddrPort) bool {
	t.Helper()
	var entries []offloadtest.UDPEntry
	l.director.do(t, func() (err error) { entries, err = offloadtest.UDPEntries(); return err })
	return slices.ContainsFunc(entries, func(e offloadtest.UDPEntry) bool { return e.Src == f.src && e.Dst.Addr() == vip.Addr() })
}

// serveUDP echoes datagrams on addr until stop is called or the test ends.
func serveUDP(t *testing.T, ns *netNS, addr netip.AddrPort) (stop func()) {
	t.Helper()
	var pc net.PacketConn
	ns.do(t, func() (err error) { pc, err = net.ListenPacket("udp4", addr.String()); return err })
	var wg sync.WaitGroup
	stop = func() { pc.Close(); wg.Wait() }
	t.Cleanup(stop)
	wg.Go(func() { // the UDP backend
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			pc.WriteTo(buf[:n], from)
		}
	})
	return stop
}

// TestSvcproxyRestartIPVS restarts svcproxy --mode ipvs (SIGTERM, then
// SIGKILL) under a connection loop, then stops it: the virtual servers outlive
// the process and a new one syncs nothing before its first Snapshot, so no
// connection fails, and a UDP flow keeps its conntrack entry (the new
// process's first sync must not be an empty one).
func TestSvcproxyRestartIPVS(t *testing.T) {
	if _, err := os.Stat(svcproxyBin); err != nil {
		t.Skipf("needs %s (test/vm puts it in the guest): %v", svcproxyBin, err)
	}
	l := newLab(t)
	vip := netip.MustParseAddrPort("198.18.0.30:80")
	signal, args := l.serve(t, restartManifests, "--mode", "ipvs", "--node-ip", nodeIP.String(), "--cluster-cidr", "198.19.0.0/16")
	udp := l.startUDPFlow(t, dnsVIP)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if !l.hasEntry(t, udp, dnsVIP) {
			t.Fatalf("before the %s restart: no conntrack entry for the UDP flow %s", sig, udp.src)
		}
		loop := l.startLoop(t, vip, time.Millisecond)
		loop.waitMore(t, 20)
		signal(sig)
		signal = l.startSvcproxySignal(t, args...)
		l.waitHealthy(t)
		loop.waitMore(t, 20)
		ok, failed, last := loop.stop()
		t.Logf("ipvs restart %s: %d connections, %d failed (last: %v)", sig, ok+failed, failed, last)
		if failed > 0 {
			t.Errorf("ipvs restart %s: %d of %d connections failed; last: %v", sig, failed, ok+failed, last)
		}
		if !l.hasEntry(t, udp, dnsVIP) {
			t.Errorf("ipvs restart %s: the UDP flow %s lost its conntrack entry", sig, udp.src)
		}
		udp.exchange(t)
	}
	// Shutdown: SIGTERM and no new process; the loop goes on for a second.
	loop := l.startLoop(t, vip, time.Millisecond)
	loop.waitMore(t, 20)
	signal(syscall.SIGTERM)
	time.Sleep(time.Second) // the loop runs on for a fixed time: what is measured
	ok, failed, last := loop.stop()
	t.Logf("ipvs shutdown: %d connections, %d failed (last: %v)", ok+failed, failed, last)
	if failed > 0 {
		t.Errorf("ipvs: %d connections failed after svcproxy stopped: the virtual servers must outlive it", failed)
	}
}

// TestSvcproxyIPVSFirstSyncUDP: a UDP flow that a userspace portal (a
// REDIRECT to a local listener) carried keeps its conntrack entry after the
// portal and the listener are gone, and with it every datagram the client
// sends goes to the dead listener. svcproxy --mode ipvs's first sync deletes
// that entry (its reply comes from the node, not from an endpoint), so the
// same client socket (same source port) reaches the endpoint through IPVS;
// /status counts the deletion.
func TestSvcproxyIPVSFirstSyncUDP(t *testing.T) {
	if _, err := os.Stat(svcproxyBin); err != nil {
		t.Skipf("needs %s (test/vm puts it in the guest): %v", svcproxyBin, err)
	}
	l := newLab(t)
	// The entry must not time out by itself while svcproxy starts under TCG.
	l.director.sysctl(t, "net/netfilter/nf_conntrack_udp_timeout", "600")
	l.director.sysctl(t, "net/netfilter/nf_conntrack_udp_timeout_stream", "600")
	portal := func(op string) []string {
		return []string{"-t", "nat", op, "PREROUTING", "-d", dnsVIP.Addr().String(), "-p", "udp", "--dport", "53",
			"-j", "REDIRECT", "--to-ports", "10053"}
	}
	l.director.output(t, "iptables", portal("-A")...)
	stopListener := serveUDP(t, l.director, netip.AddrPortFrom(nodeIP, 10053))
	udp := l.dialUDP(t, dnsVIP)
	udp.exchange(t)
	if !l.hasEntry(t, udp, dnsVIP) {
		t.Fatalf("no conntrack entry for the UDP flow %s through the portal", udp.src)
	}
	l.director.output(t, "iptables", portal("-D")...)
	stopListener()
	// The entry outlives the portal: the client's next datagram still goes
	// to the listener's port, and the node refuses it.
	udp.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := udp.c.Write([]byte("query")); err == nil {
		if n, err := udp.c.Read(make([]byte, 64)); err == nil {
			t.Fatalf("portal gone: the flow still got an answer (%d bytes): the test proves nothing", n)
		}
	}

	serveUDP(t, l.backend, netip.AddrPortFrom(backendIPs[0], 5353))
	signal, _ := l.serve(t, restartManifests, "--mode", "ipvs", "--node-ip", nodeIP.String(), "--cluster-cidr", "198.19.0.0/16")
	defer signal(syscall.SIGTERM)
	udp.exchange(t) // fails the test without an answer from the endpoint

	var st struct {
		IPv4 struct {
			Conntrack struct {
				Deleted   uint64
				Errors    uint64
				LastError string
			}
		}
	}
	body := l.get(t, "127.0.0.1:10249", "/status")
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	ct := st.IPv4.Conntrack
	t.Logf("svcproxy --mode ipvs first sync: conntrack %+v", ct)
	if ct.Deleted < 1 || ct.Errors != 0 {
		t.Errorf("/status IPv4 conntrack %+v, want at least 1 deleted and no error", ct)
	}
}
