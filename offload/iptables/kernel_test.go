package iptables

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// Real-kernel tests: the rules applied with iptables-restore in a node namespace,
// real sockets in client and backend namespaces. They need root.

// The checks every kernel mode shares (internal/offloadtest), on this mode.

func TestKernelSpread(t *testing.T) {
	l := newLab(t)
	l.CheckSpread(t, l.syncer(t, l.dataplane(t)))
}

// TestKernelTopology: trafficDistribution through the endpoints' hints
// (service.Port.Categorize): PreferSameNode, PreferSameZone, and a node
// without a zone label.
func TestKernelTopology(t *testing.T) {
	l := newLab(t)
	l.CheckTopology(t, l.syncer(t, l.dataplane(t)))
}

func TestKernelAffinity(t *testing.T) {
	l := newLab(t)
	l.CheckAffinity(t, l.syncer(t, l.dataplane(t)))
}

func TestKernelNodePort(t *testing.T) {
	l := newLab(t)
	l.CheckNodePort(t, l.syncer(t, l.dataplane(t)))
}

func TestKernelUDPConntrack(t *testing.T) {
	l := newLab(t)
	netnstestRequireConntrack(t)
	l.CheckUDPConntrack(t, l.syncer(t, l.dataplane(t)), service.IPv4)
}

// The node itself reaches a ClusterIP (OUTPUT), and a port without endpoints is
// refused at once.
func TestKernelLocalAndReject(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	l.sync(t, l.dataplane(t), st.Snapshot(
		st.Service("web", "198.18.0.10", 80, l.Endpoints(8080)),
		st.Service("empty", "198.18.0.20", 80, nil),
	))
	if _, err := offloadtest.Dial(l.Node, "198.18.0.10:80", 3); err != nil {
		t.Errorf("from the node: %v", err)
	}
	for _, ns := range []struct {
		name string
		do   func() error
	}{
		{"client", func() error { _, err := offloadtest.Dial(l.Client, "198.18.0.20:80", 1); return err }},
		{"node", func() error { _, err := offloadtest.Dial(l.Node, "198.18.0.20:80", 1); return err }},
	} {
		if err := ns.do(); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s to a port without endpoints: %v, want connection refused (REJECT)\n%s", ns.name, err,
				l.Node.Run(t, "iptables-save", "-c", "-t", "filter"))
		}
	}
}

// The rules outlive the Dataplane; a new one adopts them without a gap, and
// Cleanup leaves nothing.
func TestKernelRestartAndCleanup(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	l.sync(t, l.dataplane(t), l.Web())
	// The old process is gone; traffic flows while a new one takes over.
	ctx, cancel := context.WithCancel(context.Background())
	var ok, failed atomic.Int64
	done := make(chan struct{})
	go func() { // owned by this test, stopped by cancel
		defer close(done)
		for ctx.Err() == nil {
			if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 1); err != nil {
				failed.Add(1)
				t.Logf("during restart: %v", err)
			} else {
				ok.Add(1)
			}
		}
	}()
	for ok.Load() < 5 {
		time.Sleep(10 * time.Millisecond) // waits for traffic to flow, asserts nothing about time
	}
	restarted := l.dataplane(t)
	for range 3 {
		l.sync(t, restarted, l.Web(st.WithNodePort(30080)))
	}
	for n := ok.Load(); ok.Load() < n+5; {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if failed.Load() > 0 {
		t.Errorf("%d of %d connections failed during the restart", failed.Load(), ok.Load()+failed.Load())
	}
	if h := restarted.Health(); h.FullSyncs != 1 || h.PartialSyncs != 2 {
		t.Errorf("restarted dataplane: %+v, want one full sync then partial ones", h)
	}

	ipt, _ := kiptables.New(kiptables.Config{})
	if err := l.Node.Do(func() error { return Cleanup(context.Background(), ipt) }); err != nil {
		t.Fatal(err)
	}
	if save := l.Node.Run(t, "iptables-save"); strings.Contains(save, "SVCP-") {
		t.Errorf("after Cleanup:\n%s", save)
	}
	if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 1); err == nil {
		t.Error("the ClusterIP still answers after Cleanup")
	}
}

// Chains that belong to nothing any more are deleted in the same transaction that
// drops the jumps to them: by a partial sync (from what it applied) and by a new
// Dataplane's full sync (from iptables-save).
func TestKernelStaleChains(t *testing.T) {
	l := newLab(t)
	two := st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(8080), st.WithNodePort(30080)),
		st.Service("api", "198.18.0.20", 80, l.Endpoints(8080), st.WithAffinity(time.Minute)))
	p := l.dataplane(t)
	l.sync(t, p, two)
	l.sync(t, p, l.Web()) // partial: api goes, web loses its NodePort
	save := l.Node.Run(t, "iptables-save", "-t", "nat")
	if strings.Contains(save, "default/api") || strings.Contains(save, prefixEXT) {
		t.Errorf("after a partial sync, stale chains are left:\n%s", save)
	}
	l.sync(t, l.dataplane(t), two)           // restarted with both
	l.sync(t, l.dataplane(t), st.Snapshot()) // restarted with none: a full sync reads what is there
	save = l.Node.Run(t, "iptables-save", "-t", "nat")
	for _, prefix := range portChainPrefixes {
		if strings.Contains(save, prefix) {
			t.Errorf("after a full sync of nothing, %s chains are left:\n%s", prefix, save)
		}
	}
}

// An established TCP connection is left alone when its
// endpoint turns not ready, leaves the slice, or its Service is deleted: the
// endpoint is no longer picked, and conntrack carries the connection on.
func TestKernelEstablishedSurvive(t *testing.T) {
	l := newLab(t)
	l.ServeEcho(t, 9090)
	p := l.dataplane(t)
	all := func() *service.Snapshot { return st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(9090))) }
	without := func(backend string, change func(eps []service.Endpoint, i int) []service.Endpoint) *service.Snapshot {
		eps := l.Endpoints(9090)
		i := int(backend[1] - '0')
		return st.Snapshot(st.Service("web", "198.18.0.10", 80, change(eps, i)))
	}
	for _, tt := range []struct {
		name string
		snap func(backend string) *service.Snapshot
	}{
		{"endpoint not ready", func(b string) *service.Snapshot {
			return without(b, func(eps []service.Endpoint, i int) []service.Endpoint { eps[i].Ready = false; return eps })
		}},
		{"endpoint left the slice", func(b string) *service.Snapshot {
			return without(b, func(eps []service.Endpoint, i int) []service.Endpoint { return append(eps[:i], eps[i+1:]...) })
		}},
		{"service deleted", func(string) *service.Snapshot { return st.Snapshot() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l.sync(t, p, all())
			c, backend := l.DialEcho(t, "198.18.0.10:80")
			defer c.Close()
			l.sync(t, p, tt.snap(backend))
			if err := offloadtest.EchoLine(c, "still here"); err != nil {
				t.Errorf("the connection to %s after %s: %v", backend, tt.name, err)
			}
		})
	}
}

// A new process's first sync deletes the UDP entries that an earlier one
// left pointing at no endpoint (kube-proxy's conntrack reconciliation).
func TestKernelFirstSyncUDPConntrack(t *testing.T) {
	l := newLab(t)
	netnstestRequireConntrack(t)
	l.FirstSyncMovesUDP(t, func(eps []service.Endpoint) kernelsync.Health {
		p := l.dataplane(t)
		l.sync(t, p, st.Snapshot(st.Service("dns", "198.18.0.53", 53, eps, st.WithProtocol(service.UDP))))
		return p.Health().Health
	})
}

// A one-way UDP sender to a Service whose endpoints go to zero is refused,
// not left on its conntrack entry to the old endpoint (kubernetes#139629).
func TestKernelUDPOneWayToZero(t *testing.T) {
	l := newLab(t)
	netnstestRequireConntrack(t)
	l.CheckUDPOneWayToZero(t, func() offloadtest.Sync { return l.syncer(t, l.dataplane(t)) }, service.IPv4)
}
