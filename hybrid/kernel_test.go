package hybrid_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/proxytest"
	"github.com/svcproxy/svcproxy/internal/testbin"
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
// finishes after it, and one opened on the kernel path finishes after the
// demotion; the port that stays cool keeps its portal throughout.
func TestHybridPromotion(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-save", "iptables-restore")
	e := proxytest.New(t)
	startProxy(t, e, "--promote-conn-rate", "20", "--promote-after", "1s", "--demote-after", "2s")

	// A low rate: a few connections leave both ports in userspace.
	before := e.Port(t, "default/web:http").Samples
	for _, vip := range []string{hotVIP, coldVIP, hotVIP} {
		c, peer := e.Dial(t, vip)
		c.Close()
		if want := proxytest.NodeAddrB.Addr().String(); peer != want {
			t.Fatalf("%s in userspace: backend saw %s, want the node's %s", vip, peer, want)
		}
	}
	e.WaitPort(t, "default/web:http", "three more samples", func(p proxytest.StatusPort) bool { return p.Samples >= before+3 })
	if p := e.Port(t, "default/web:http"); p.Path != "userspace" {
		t.Fatalf("web after 3 connections: path %s, want userspace", p.Path)
	}

	// A connection opened in userspace, to finish after the promotion.
	long, peer := e.Dial(t, hotVIP)
	defer long.Close()
	if peer != proxytest.NodeAddrB.Addr().String() {
		t.Fatalf("long connection: backend saw %s, want the node's address", peer)
	}

	b := proxytest.StartBurst(t, e.Client, hotVIP, 10*time.Millisecond) // ~100/s

	e.WaitPort(t, "default/web:http", "promoted to iptables", func(p proxytest.StatusPort) bool { return p.Path == "iptables" })
	save := e.Node.Run(t, "iptables-save", "-t", "nat")
	if !strings.Contains(save, ":SVCP-SVC-") || strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32") {
		t.Errorf("promoted web: want its SVCP-SVC- chain and no portal:\n%s", save)
	}
	if !strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.11/32") {
		t.Errorf("cold lost its portal:\n%s", save)
	}
	backendSees(t, e, hotVIP, proxytest.ClientAddr, "web on iptables")
	backendSees(t, e, coldVIP, proxytest.NodeAddrB, "cold")
	// A connection the kernel carries, to finish after the demotion.
	onKernel, peer := e.Dial(t, hotVIP)
	defer onKernel.Close()
	if want := proxytest.ClientAddr.Addr().String(); peer != want {
		t.Fatalf("connection on iptables: backend saw %s, want the client's %s", peer, want)
	}
	// The kernel's counters are read: the burst shows as a rate on the iptables path.
	e.WaitPort(t, "default/web:http", "a kernel rate", func(p proxytest.StatusPort) bool { return p.Path == "iptables" && p.Rate > 0 })
	proxytest.Echo(t, long, "still here")
	long.Close()

	ok, failed, lastErr := b.Stop()
	t.Logf("burst: %d connections, %d failed", ok, failed)
	if failed > 0 {
		t.Errorf("burst: %d of %d connections failed across the promotion; last: %v", failed, ok+failed, lastErr)
	}

	// A trickle, well below the rate, goes on across the demotion.
	trickle := proxytest.StartBurst(t, e.Client, hotVIP, 200*time.Millisecond) // ~5/s
	e.WaitPort(t, "default/web:http", "demoted to userspace", func(p proxytest.StatusPort) bool { return p.Path == "userspace" })
	proxytest.Echo(t, onKernel, "still here after the demotion")
	ok, failed, lastErr = trickle.Stop()
	t.Logf("trickle: %d connections, %d failed", ok, failed)
	if failed > 0 {
		t.Errorf("trickle: %d of %d connections failed across the demotion; last: %v", failed, ok+failed, lastErr)
	}
	save = e.Node.Run(t, "iptables-save", "-t", "nat")
	if strings.Contains(save, ":SVCP-SVC-") || !strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32") {
		t.Errorf("demoted web: want its portal back and no SVCP-SVC- chain:\n%s", save)
	}
	backendSees(t, e, hotVIP, proxytest.NodeAddrB, "web back in userspace")
	metrics := e.Get(t, "/metrics")
	for _, m := range []string{`svcproxy_hybrid_promotions_total{ip_family="IPv4",offload="iptables"}`, `svcproxy_hybrid_demotions_total{ip_family="IPv4",offload="iptables"}`} {
		if !strings.Contains(metrics, m+" ") || strings.Contains(metrics, m+" 0\n") {
			t.Errorf("/metrics: want %s at least 1:\n%s", m, metrics)
		}
	}
	e.LogMoves(t)
}

// startProxy runs svcproxy --mode hybrid in the node namespace and waits for
// its first sync.
func startProxy(t *testing.T, e *proxytest.Env, flags ...string) {
	t.Helper()
	manifests := filepath.Join(e.Dir, "services.yaml")
	if err := os.WriteFile(manifests, []byte(hybridManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--mode", "hybrid", "--offload", "iptables", "--services", manifests,
		"--node-ip", proxytest.NodeAddrC.Addr().String(),
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249"}
	e.Start(t, append(args, flags...)...)
	e.WaitHealthy(t)
	e.WaitPort(t, "default/web:http", "sampled", func(p proxytest.StatusPort) bool { return p.Samples > 0 })
}

const externalLocalManifests = `apiVersion: v1
kind: Service
metadata: {name: local, namespace: default}
spec:
  type: NodePort
  clusterIP: 198.18.0.12
  externalTrafficPolicy: Local
  ports: [{name: http, port: 80, protocol: TCP, targetPort: 8080, nodePort: 30080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: local-1, namespace: default, labels: {kubernetes.io/service-name: local}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [198.19.2.2], nodeName: node-a, conditions: {ready: true}}]
`

// TestHybridExternalLocal: a NodePort Service with externalTrafficPolicy
// Local is on the kernel path from the start, with no traffic at all, so its
// endpoint sees the client's address through the node port, as that policy
// promises; the cold ClusterIP Service beside it stays in userspace, where the
// endpoint sees the node's address.
func TestHybridExternalLocal(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-save", "iptables-restore")
	e := proxytest.New(t)
	manifests := filepath.Join(e.Dir, "services.yaml")
	if err := os.WriteFile(manifests, []byte(hybridManifests+"---\n"+externalLocalManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	e.Start(t, "--mode", "hybrid", "--offload", "iptables", "--services", manifests,
		"--hostname-override", "node-a", "--cluster-cidr", "198.19.2.0/24",
		"--node-ip", proxytest.NodeAddrC.Addr().String(),
		"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249")
	e.WaitHealthy(t)
	e.WaitPort(t, "default/local:http", "on the kernel path", func(p proxytest.StatusPort) bool { return p.Path == "iptables" })
	if save := e.Node.Run(t, "iptables-save", "-t", "nat"); strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.12/32") {
		t.Errorf("local on the kernel path still has a portal:\n%s", save)
	}
	backendSees(t, e, proxytest.NodeAddrC.Addr().String()+":30080", proxytest.ClientAddr, "node port of local")
	backendSees(t, e, coldVIP, proxytest.NodeAddrB, "cold (userspace)")
	e.WaitPort(t, "default/cold:http", "sampled", func(p proxytest.StatusPort) bool { return p.Samples > 0 })
	if p := e.Port(t, "default/cold:http"); p.Path != "userspace" {
		t.Errorf("cold: path %s, want userspace", p.Path)
	}
}

// backendSees dials addr through the proxy and checks which address the
// backend saw as the client's: the client's own where the kernel carries the
// connection, the node's (from) where the userspace proxier opened it.
func backendSees(t *testing.T, e *proxytest.Env, addr string, from netip.Prefix, what string) {
	t.Helper()
	c, peer := e.Dial(t, addr)
	c.Close()
	if want := from.Addr().String(); peer != want {
		t.Errorf("%s: backend saw %s, want %s", what, peer, want)
	}
}
