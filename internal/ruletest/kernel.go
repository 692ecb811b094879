package ruletest

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// KernelPath is a rule-writing path on the real kernel: its mode in the
// node namespace of an offloadtest.Lab, with the node's own conntrack. The
// Kernel checks below run each path's through it.
type KernelPath interface {
	// Require skips t unless it may run the path's rules of family: as
	// root, with the path's tools.
	Require(t *testing.T, family service.Family)
	// New returns the path's mode for o.Family (o's NodeIP, periods and
	// clock) on l's node, its pods in o.Node(true).ClusterCIDR.
	New(t *testing.T, l *offloadtest.Lab, o Options) KernelRig
	// Cleanup runs the path's Cleanup of family in l's node.
	Cleanup(t *testing.T, l *offloadtest.Lab, family service.Family)
	// Ours lists what of the path's own objects l's node holds for family,
	// in the kernel's listing; "" when there is none.
	Ours(t *testing.T, l *offloadtest.Lab, family service.Family) string
	// List lists the path's tables of the node's kernel, for failure
	// messages.
	List(t *testing.T, l *offloadtest.Lab) string
}

// KernelRig is a path's mode on the real kernel: Sync applies a Snapshot,
// Run resyncs every SyncPeriod (offloadtest.Lab.RunOnNode).
type KernelRig interface {
	offloadtest.Dataplane
	Health() kernelsync.Health
	Connections(ctx context.Context, snap *service.Snapshot, ports dataplane.PortSet) (map[service.PortName]uint64, error)
}

// Lab is offloadtest's lab (a node namespace routing between a client and
// three backends) with a rule-writing path for its node.
type Lab struct {
	*offloadtest.Lab
	Path KernelPath
}

// NewLab builds the lab for path, or skips t when it cannot run.
func NewLab(t *testing.T, path KernelPath) *Lab {
	t.Helper()
	path.Require(t, service.IPv4)
	return &Lab{Lab: offloadtest.New(t, st.ThisNode), Path: path}
}

// NewDualLab is NewLab's topology with an IPv6 address next to every IPv4
// one (offloadtest.Lab.AddIPv6).
func NewDualLab(t *testing.T, path KernelPath) *Lab {
	t.Helper()
	path.Require(t, service.IPv6)
	l := NewLab(t, path)
	l.AddIPv6(t)
	return l
}

// Mode returns a new mode of the path on the node: a new process, as far
// as the kernel knows.
func (l *Lab) Mode(t *testing.T, o Options) KernelRig {
	t.Helper()
	return l.Path.New(t, l.Lab, o)
}

// Sync applies snap with r inside the node namespace.
func (l *Lab) Sync(t *testing.T, r KernelRig, snap *service.Snapshot) {
	t.Helper()
	if err := l.Node.Do(func() error { return r.Sync(context.Background(), snap) }); err != nil {
		t.Fatal(err)
	}
}

// Syncer is the offloadtest.Sync of r: each call applies a Snapshot with it
// in the node namespace and returns its Health.
func (l *Lab) Syncer(t *testing.T, r KernelRig) offloadtest.Sync {
	return func(snap *service.Snapshot) kernelsync.Health {
		l.Sync(t, r, snap)
		return r.Health()
	}
}

// syncer is a new mode's Syncer.
func (l *Lab) syncer(t *testing.T, o Options) offloadtest.Sync { return l.Syncer(t, l.Mode(t, o)) }

// The checks every kernel mode shares (internal/offloadtest), on a path.

func KernelSpread(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.CheckSpread(t, l.syncer(t, Options{}))
}

// KernelTopology: trafficDistribution through the endpoints' hints
// (service.Port.Categorize): PreferSameNode, PreferSameZone, and a node
// without a zone label.
func KernelTopology(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.CheckTopology(t, l.syncer(t, Options{}))
}

func KernelAffinity(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.CheckAffinity(t, l.syncer(t, Options{}))
}

func KernelNodePort(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.CheckNodePort(t, l.syncer(t, Options{}))
}

// KernelUDPConntrack: a UDP flow keeps its endpoint, and moves when the
// endpoint leaves (offloadtest.Lab.CheckUDPConntrack), in family's
// conntrack table.
func KernelUDPConntrack(t *testing.T, path KernelPath, family service.Family) {
	l := NewLab(t, path)
	if family == service.IPv6 {
		l = NewDualLab(t, path)
	}
	l.CheckUDPConntrack(t, l.syncer(t, Options{Family: family}), family)
}

// KernelFirstSyncUDPConntrack: a new process's first sync deletes the UDP
// entries that an earlier one left pointing at no endpoint (kube-proxy's
// conntrack reconciliation).
func KernelFirstSyncUDPConntrack(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.FirstSyncMovesUDP(t, func(eps []service.Endpoint) kernelsync.Health {
		r := l.Mode(t, Options{})
		l.Sync(t, r, st.Snapshot(st.Service("dns", "198.18.0.53", 53, eps, st.WithProtocol(service.UDP))))
		return r.Health()
	})
}

// KernelUDPOneWayToZero: a one-way UDP sender to a Service whose endpoints
// go to zero is refused, not left on its conntrack entry to the old endpoint
// (kubernetes#139629), in family.
func KernelUDPOneWayToZero(t *testing.T, path KernelPath, family service.Family) {
	l := NewLab(t, path)
	if family == service.IPv6 {
		l = NewDualLab(t, path)
	}
	l.CheckUDPOneWayToZero(t, func() offloadtest.Sync { return l.syncer(t, Options{Family: family}) }, family)
}

// KernelLocalAndReject: the node itself reaches a ClusterIP (output), and a
// port without endpoints is refused at once, from the client and from the
// node; then the path's own refusals (own: where the path refuses more),
// from the namespace "client" or "node".
func KernelLocalAndReject(t *testing.T, path KernelPath, own ...Refusal) {
	l := NewLab(t, path)
	l.ServeTCP(t, 8080)
	l.Sync(t, l.Mode(t, Options{}), st.Snapshot(
		st.Service("web", "198.18.0.10", 80, l.Endpoints(8080)),
		st.Service("empty", "198.18.0.20", 80, nil),
	))
	if _, err := offloadtest.Dial(l.Node, "198.18.0.10:80", 3); err != nil {
		t.Errorf("from the node: %v", err)
	}
	for _, tc := range append([]Refusal{
		{"client, no endpoints", "client", "198.18.0.20:80"},
		{"node, no endpoints", "node", "198.18.0.20:80"},
	}, own...) {
		ns := l.Client
		if tc.From == "node" {
			ns = l.Node
		}
		if _, err := offloadtest.Dial(ns, tc.Dst, 1); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: %v, want connection refused (REJECT)\n%s", tc.Name, err, path.List(t, l.Lab))
		}
	}
}

// Refusal is a connection KernelLocalAndReject expects refused.
type Refusal struct{ Name, From, Dst string }

// KernelRestartAndCleanup: the rules outlive the mode; a new one adopts
// them without a gap in traffic, and Cleanup (run twice: the second finds
// nothing, and that is fine) leaves nothing of the path's.
func KernelRestartAndCleanup(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.ServeTCP(t, 8080)
	l.Sync(t, l.Mode(t, Options{}), l.Web())
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
	restarted := l.Mode(t, Options{})
	for range 3 {
		l.Sync(t, restarted, l.Web(st.WithNodePort(30080)))
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
		t.Errorf("restarted mode: %+v, want one full sync then partial ones", h)
	}

	for range 2 {
		path.Cleanup(t, l.Lab, service.IPv4)
	}
	if ours := path.Ours(t, l.Lab, service.IPv4); ours != "" {
		t.Errorf("after Cleanup:\n%s", ours)
	}
	if err := l.Client.DialDropped("198.18.0.10:80"); err != nil {
		t.Error("the ClusterIP still answers after Cleanup")
	}
}
