package localhost

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	offloadnftables "github.com/svcproxy/svcproxy/offload/nftables"
	"github.com/svcproxy/svcproxy/service/servicetest"
)

// freeLoopbackPort is a TCP port nothing listens on at 127.0.0.1 now: a node
// port for the listeners.
func freeLoopbackPort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// backend answers each connection with "hello" and closes it.
func backend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "hello\n")
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// TestLocalhostNodePorts: beside nftables mode (a Fake table), the listeners
// answer a TCP NodePort on 127.0.0.1 with its endpoint; a node port another
// socket holds is logged once, not an error of Sync, and counted; /status
// has the table's document and the listeners'.
func TestLocalhostNodePorts(t *testing.T) {
	table, err := offloadnftables.New(offloadnftables.Config{Node: dataplane.Node{NodeName: servicetest.ThisNode}, LocalhostNodePorts: true, NFT: knft.NewFake(offloadnftables.Table)})
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	l, err := New(Config{Kernel: table, Node: dataplane.Node{NodeName: servicetest.ThisNode}, ShutdownGrace: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Listeners().Shutdown(context.Background()) })

	free := freeLoopbackPort(t)
	held, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := uint16(held.Addr().(*net.TCPAddr).Port)
	ep := servicetest.Endpoint(backend(t), servicetest.ThisNode)
	snap := servicetest.Snapshot(
		servicetest.Service("web", "198.18.0.10", 80, nil, servicetest.WithNodePort(free)),
		servicetest.Service("clash", "198.18.0.11", 80, nil, servicetest.WithNodePort(taken)))
	for _, svc := range snap.Services() {
		svc.Ports[0].Endpoints = append(svc.Ports[0].Endpoints, ep)
	}
	for range 2 { // the second Sync logs nothing new
		if err := l.Sync(context.Background(), snap); err != nil {
			t.Fatalf("Sync: %v (a taken node port is no error of the table)", err)
		}
	}

	c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", free))
	if err != nil {
		t.Fatalf("127.0.0.1:%d: %v", free, err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || got != "hello\n" {
		t.Fatalf("127.0.0.1:%d answered %q, %v; want the endpoint's hello", free, got, err)
	}
	if n := strings.Count(logs.String(), "localhost NodePort skipped"); n != 1 || !strings.Contains(logs.String(), "default/clash:p") {
		t.Errorf("log has %d lines for the taken node port, want 1 naming default/clash:p:\n%s", n, logs.String())
	}
	st, ok := l.Status().(map[string]any)
	if !ok || st["localhostNodePorts"] == nil || st["mode"] != "nftables" {
		t.Errorf("Status %v: want nftables mode's document with localhostNodePorts", l.Status())
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	listeners := -1.0
	for _, f := range fams {
		if f.GetName() == "kubeproxy_nftables_localhost_nodeport_listeners" {
			listeners = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if listeners != 1 {
		t.Errorf("kubeproxy_nftables_localhost_nodeport_listeners = %v, want 1 (web's; clash's port is taken)", listeners)
	}
}

// The listeners beside the table count its full syncs as their own
// (dataplane.FullSyncs): the first sync is full.
func TestLocalhostFullSyncs(t *testing.T) {
	table, err := offloadnftables.New(offloadnftables.Config{Node: dataplane.Node{NodeName: servicetest.ThisNode}, LocalhostNodePorts: true, NFT: knft.NewFake(offloadnftables.Table)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Kernel: table, Node: dataplane.Node{NodeName: servicetest.ThisNode}, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Listeners().Shutdown(context.Background()) })
	if n := dataplane.FullSyncs(l); n != 0 {
		t.Fatalf("%d full syncs before the first sync", n)
	}
	if err := l.Sync(context.Background(), servicetest.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if n := dataplane.FullSyncs(l); n != 1 {
		t.Errorf("%d full syncs after the first sync, want 1", n)
	}
}
