package hybrid_test

import (
	"fmt"
	"net/netip"
	"os"
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
		backendSees(t, e, vip, proxytest.NodeAddrB, vip+" in userspace")
	}
	e.WaitPort(t, "default/web:http", "three more samples", func(p proxytest.StatusPort) bool { return p.Samples >= before+3 })
	if p := e.Port(t, "default/web:http"); p.Path != "userspace" {
		t.Fatalf("web after 3 connections: path %s, want userspace", p.Path)
	}

	natTable := func() string { return e.Node.Run(t, "iptables-save", "-t", "nat") }
	promoteAndDemote(t, e, "iptables", func() {
		save := natTable()
		if !strings.Contains(save, ":SVCP-SVC-") || strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32") {
			t.Errorf("promoted web: want its SVCP-SVC- chain and no portal:\n%s", save)
		}
		if !strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.11/32") {
			t.Errorf("cold lost its portal:\n%s", save)
		}
	}, func() {
		if save := natTable(); strings.Contains(save, ":SVCP-SVC-") || !strings.Contains(save, "-A SVCP-PORTALS-CONTAINER -d 198.18.0.10/32") {
			t.Errorf("demoted web: want its portal back and no SVCP-SVC- chain:\n%s", save)
		}
	})
}

// promoteAndDemote drives web hot until it moves to the kernel path and
// lets it cool until it moves back, live, as svcproxy started by startProxy
// with a demotion delay does: a connection opened in userspace finishes
// after the promotion, one the kernel carries finishes after the demotion,
// and no connection of the burst that promotes web or of the trickle that
// lets it go fails. In userspace web's backend sees the node's address, on
// the kernel path the client's; cold stays in userspace. promoted and
// demoted check what the kernel path holds after each move; the move
// counts in /metrics last.
func promoteAndDemote(t *testing.T, e *proxytest.Env, path string, promoted, demoted func()) {
	t.Helper()
	long, peer := e.Dial(t, hotVIP) // opened in userspace, to finish after the promotion
	defer long.Close()
	if peer != proxytest.NodeAddrB.Addr().String() {
		t.Fatalf("long connection: backend saw %s, want the node's address", peer)
	}

	burst := proxytest.StartBurst(t, e.Client, hotVIP, 10*time.Millisecond) // ~100/s
	e.WaitPort(t, "default/web:http", "promoted to "+path, func(p proxytest.StatusPort) bool { return p.Path == path })
	promoted()
	backendSees(t, e, hotVIP, proxytest.ClientAddr, "web on "+path)
	backendSees(t, e, coldVIP, proxytest.NodeAddrB, "cold")
	onKernel, peer := e.Dial(t, hotVIP) // carried by the kernel, to finish after the demotion
	defer onKernel.Close()
	if want := proxytest.ClientAddr.Addr().String(); peer != want {
		t.Fatalf("connection on %s: backend saw %s, want the client's %s", path, peer, want)
	}
	// The kernel's counters are read: the burst shows as a rate on the kernel path.
	e.WaitPort(t, "default/web:http", "a kernel rate", func(p proxytest.StatusPort) bool { return p.Path == path && p.Rate > 0 })
	proxytest.Echo(t, long, "still here")
	long.Close()
	burst.Check(t, "burst", "the promotion")

	// A trickle, well below the rate, goes on across the demotion.
	trickle := proxytest.StartBurst(t, e.Client, hotVIP, 200*time.Millisecond) // ~5/s
	e.WaitPort(t, "default/web:http", "demoted to userspace", func(p proxytest.StatusPort) bool { return p.Path == "userspace" })
	proxytest.Echo(t, onKernel, "still here after the demotion")
	trickle.Check(t, "trickle", "the demotion")
	demoted()
	backendSees(t, e, hotVIP, proxytest.NodeAddrB, "web back in userspace")

	metrics := e.Get(t, "/metrics")
	for _, m := range []string{
		fmt.Sprintf(`svcproxy_hybrid_promotions_total{ip_family="IPv4",offload=%q}`, path),
		fmt.Sprintf(`svcproxy_hybrid_demotions_total{ip_family="IPv4",offload=%q}`, path),
	} {
		if !strings.Contains(metrics, m+" ") || strings.Contains(metrics, m+" 0\n") {
			t.Errorf("/metrics: want %s at least 1:\n%s", m, metrics)
		}
	}
	e.LogMoves(t)
}

// startProxy runs svcproxy --mode hybrid (--offload iptables, unless flags
// say otherwise) over web and cold in the node namespace and waits until
// web is sampled.
func startProxy(t *testing.T, e *proxytest.Env, flags ...string) {
	t.Helper()
	e.Serve(t, hybridManifests, append([]string{"--mode", "hybrid", "--offload", "iptables",
		"--node-ip", proxytest.NodeAddrC.Addr().String()}, flags...)...)
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
	e.Serve(t, hybridManifests+"---\n"+externalLocalManifests, "--mode", "hybrid", "--offload", "iptables",
		"--hostname-override", "node-a", "--cluster-cidr", "198.19.2.0/24",
		"--node-ip", proxytest.NodeAddrC.Addr().String())
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
