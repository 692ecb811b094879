package restart

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/internal/proxytest"
	"github.com/svcproxy/svcproxy/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

const (
	webVIP = "198.18.0.10:80"
	dnsVIP = "198.18.0.53:53"
)

// manifests: default/web (TCP, the backend's peer server) and default/dns
// (UDP, for the conntrack entries a restart must leave alone).
const manifests = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 198.18.0.10
  ports: [{name: http, port: 80, protocol: TCP, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: default}
spec:
  clusterIP: 198.18.0.53
  ports: [{name: dns, port: 53, protocol: UDP, targetPort: 5353}]
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
metadata: {name: dns-1, namespace: default, labels: {kubernetes.io/service-name: dns}}
addressType: IPv4
ports: [{name: dns, port: 5353, protocol: UDP}]
endpoints: [{addresses: [198.19.2.2], conditions: {ready: true}}]
`

// phase is one disruption and the connections the 1 ms loop saw across it.
type phase struct {
	name       string
	ok, failed int64
	lastErr    error
}

// TestRestart runs each mode under a connection loop (one connection at a
// time, a new one 1 ms after the last ended) across a SIGTERM restart, a
// SIGKILL restart and a shutdown, and counts the failed connections of each.
func TestRestart(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-save", "iptables-restore")
	// hybrid: web is promoted before the loop starts and never demoted.
	hybrid := []string{"--mode", "hybrid", "--promote-conn-rate", "20", "--promote-after", "1s", "--demote-after", "0"}
	modes := []struct {
		name  string
		flags []string
		// zero: the mode promises no failed connection across restarts.
		zero bool
		// promoted: in hybrid mode, the kernel path web is promoted to.
		promoted string
	}{
		{"iptables", []string{"--mode", "iptables"}, true, ""},
		{"nftables", []string{"--mode", "nftables"}, true, ""},
		{"hybrid-iptables", append(slices.Clone(hybrid), "--offload", "iptables"), true, "iptables"},
		{"hybrid-nftables", append(slices.Clone(hybrid), "--offload", "nftables"), true, "nftables"},
		{"userspace", []string{"--mode", "userspace", "--shutdown-grace", "1s"}, false, ""},
	}
	var report []string
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			if m.name == "nftables" || m.promoted == "nftables" {
				if _, err := exec.LookPath("nft"); err != nil {
					t.Skip("needs nft (package nftables)")
				}
			}
			phases := runMode(t, m.name, m.promoted, m.flags)
			for _, p := range phases {
				line := fmt.Sprintf("%-15s %-16s %6d connections, %4d failed", m.name, p.name, p.ok+p.failed, p.failed)
				if p.lastErr != nil {
					line += fmt.Sprintf(" (last: %v)", p.lastErr)
				}
				report = append(report, line)
				if m.zero && p.name != "shutdown" && p.failed > 0 {
					t.Errorf("%s: %d of %d connections failed across %s; last: %v", m.name, p.failed, p.ok+p.failed, p.name, p.lastErr)
				}
				if m.zero && p.name == "shutdown" && m.promoted == "" && p.failed > 0 {
					t.Errorf("%s: %d connections failed after svcproxy stopped: the rules must outlive it", m.name, p.failed)
				}
			}
		})
	}
	t.Logf("failed connections (1 ms loop; load average %s):\n%s", loadAverage(), strings.Join(report, "\n"))
}

func runMode(t *testing.T, mode, promotedPath string, flags []string) []phase {
	e := proxytest.New(t)
	args := e.Serve(t, manifests, append([]string{"--node-ip", proxytest.NodeAddrC.Addr().String()}, flags...)...)
	// In hybrid mode the promise is for a promoted port: a new process starts
	// every port in userspace (portal first, so nothing is lost), and the loop
	// makes web hot again before the next disruption.
	promoted := func() {
		if promotedPath != "" {
			e.WaitPort(t, "default/web:http", "promoted", func(p proxytest.StatusPort) bool { return p.Path == promotedPath })
		}
	}
	udp := udpFlow(t, e)
	var phases []phase
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		b := proxytest.StartBurst(t, e.Client, webVIP, time.Millisecond)
		waitConnections(t, b, 50)
		promoted()
		if mode != "userspace" && !hasFlow(t, e, udp.src) {
			t.Fatalf("%s: before the %s restart, no conntrack entry for the UDP flow %s", mode, sig, udp.src)
		}
		stop(t, e, sig)
		e.Start(t, args...)
		e.WaitHealthy(t)
		waitConnections(t, b, 50) // well after the new process's first sync
		ok, failed, last := b.Stop()
		phases = append(phases, phase{"restart " + sig.String(), ok, failed, last})
		// Nothing was sent on the flow since before the signal: an entry
		// found now is the one made before the restart.
		if mode != "userspace" && !hasFlow(t, e, udp.src) {
			t.Errorf("%s: after a %s restart the UDP flow %s lost its conntrack entry", mode, sig, udp.src)
		}
		udp.send(t)
	}
	// Shutdown: SIGTERM and no new process, the loop going on for a second.
	b := proxytest.StartBurst(t, e.Client, webVIP, time.Millisecond)
	waitConnections(t, b, 50)
	promoted()
	stop(t, e, syscall.SIGTERM)
	time.Sleep(time.Second) // the loop runs on for a fixed time: what is measured
	ok, failed, last := b.Stop()
	phases = append(phases, phase{"shutdown", ok, failed, last})
	return phases
}

// stop signals the running svcproxy and waits for it to exit.
func stop(t *testing.T, e *proxytest.Env, sig syscall.Signal) {
	t.Helper()
	if err := e.Proxy.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	_ = e.Proxy.Wait()
}

// waitConnections waits until the loop has made n more connections: a
// readiness signal that traffic flows, not a timing.
func waitConnections(t *testing.T, b *proxytest.Burst, n int64) {
	t.Helper()
	start := b.Total()
	proxytest.WaitFor(t, fmt.Sprintf("%d more connections", n), func() (bool, string) {
		got := b.Total() - start
		return got >= n, fmt.Sprintf("%d", got)
	})
}

// udp is a UDP flow from the client to the dns VIP: one socket, one
// conntrack entry in the node. The backend does not answer (its ICMP port
// unreachable makes no difference to the entry).
type udp struct {
	c   net.Conn
	src netip.AddrPort
}

// udpFlow sends one datagram from the client to the dns VIP, making a
// conntrack entry DNATed to the backend. The node's UDP conntrack timeout is
// raised to 10 minutes and nothing is sent across a restart: an entry found
// after it is the one made before (a datagram sent meanwhile would make a new
// one and hide the loss).
func udpFlow(t *testing.T, e *proxytest.Env) *udp {
	t.Helper()
	e.Node.Sysctl(t, "net.netfilter.nf_conntrack_udp_timeout", "600")
	u := &udp{}
	if err := e.Client.Do(func() (err error) {
		u.c, err = net.Dial("udp4", dnsVIP)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.c.Close() })
	u.src = netip.MustParseAddrPort(u.c.LocalAddr().String())
	u.send(t)
	proxytest.WaitFor(t, "the UDP flow's conntrack entry", func() (bool, string) {
		return hasFlow(t, e, u.src), "none"
	})
	return u
}

// send sends one datagram on the flow.
func (u *udp) send(t *testing.T) {
	t.Helper()
	// ECONNREFUSED is the backend's ICMP for an earlier datagram: no matter.
	if _, err := u.c.Write([]byte("query")); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatal(err)
	}
}

// hasFlow reports whether the node's conntrack table has the UDP flow from src
// to the dns VIP.
func hasFlow(t *testing.T, e *proxytest.Env, src netip.AddrPort) bool {
	t.Helper()
	var entries []offloadtest.UDPEntry
	if err := e.Node.Do(func() (err error) { entries, err = offloadtest.UDPEntries(); return err }); err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(entries, func(e offloadtest.UDPEntry) bool { return e.Src == src && e.Dst.Addr().String() == "198.18.0.53" })
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
