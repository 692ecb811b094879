package ruletest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// Compare reports how the state a partial sync left (partial) differs from
// what a full sync writes (full), both Rig.Dump; nil compares them for
// equality. nftables' leaves for the next full sync what it emptied.
type Compare func(t *testing.T, partial, full string)

func compare(t *testing.T, c Compare, partial, full string) {
	t.Helper()
	if c != nil {
		c(t, partial, full)
	} else if partial != full {
		t.Errorf("after the partial sync:\n%s\nwant what a full sync writes:\n%s", partial, full)
	}
}

// fresh is what a new Rig's full sync of snap writes.
func fresh(t *testing.T, path Path, snap *service.Snapshot) string {
	t.Helper()
	r := path.New(t, Options{})
	Sync(t, r, snap)
	return r.Dump()
}

// CheckPartialSyncs: each step of History, synced partially, leaves what a
// full sync of it from scratch writes.
func CheckPartialSyncs(t *testing.T, path Path, c Compare) {
	r := path.New(t, Options{})
	for i, snap := range History() {
		Sync(t, r, snap)
		t.Run(fmt.Sprintf("step %d", i), func(t *testing.T) { compare(t, c, r.Dump(), fresh(t, path, snap)) })
	}
	h := r.Health()
	if h.FullSyncs != 1 || h.PartialSyncs != uint64(len(History())-1) || !h.Healthy {
		t.Errorf("health %+v: want 1 full sync and %d partial ones", h, len(History())-1)
	}
}

// CheckEveryField: a partial sync keeps a port's rules while
// service.Port.RendersSameAs says the port renders the same; after a change
// of any one field of a port (servicetest.Variants), the kernel and the
// status are what a full sync writes, and the fields no renderer reads change
// nothing (servicetest.CheckPartialSyncs).
func CheckEveryField(t *testing.T, path Path, c Compare) {
	st.CheckPartialSyncs(t, func(t *testing.T) st.Path { return &variantPath{path.New(t, Options{})} },
		func(t *testing.T, partial, full string) {
			gotKernel, gotStatus, _ := strings.Cut(partial, statusMark)
			wantKernel, wantStatus, _ := strings.Cut(full, statusMark)
			compare(t, c, gotKernel, wantKernel)
			if gotStatus != wantStatus {
				t.Errorf("status after the partial sync:\n%s\nwant (a full sync):\n%s", gotStatus, wantStatus)
			}
		})
}

// statusMark parts the kernel's state from the status in variantPath.State.
const statusMark = "\n--- status:\n"

// variantPath is a Rig as servicetest's checks drive it.
type variantPath struct{ Rig }

func (v *variantPath) Sync(t *testing.T, snap *service.Snapshot) { Sync(t, v.Rig, snap) }

func (v *variantPath) State(t *testing.T) string {
	status, err := json.MarshalIndent(v.Ports(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return v.Dump() + statusMark + string(status)
}

// CheckNothingChanged: a sync of the Snapshot the last sync applied writes
// nothing to the kernel.
func CheckNothingChanged(t *testing.T, path Path) {
	r := path.New(t, Options{})
	snap := st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()))
	for range 3 {
		Sync(t, r, snap)
	}
	if n := r.Writes(); n != 1 {
		t.Errorf("%d writes for one state, want 1", n)
	}
}

// CheckFullSyncPeriod: a sync is full again FullSyncPeriod after the last
// full one, partial before.
func CheckFullSyncPeriod(t *testing.T, path Path) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	r := path.New(t, Options{FullSyncPeriod: time.Minute, Now: func() time.Time { return now }})
	snap := History()[0]
	Sync(t, r, snap)
	now = now.Add(30 * time.Second)
	Sync(t, r, snap)
	now = now.Add(31 * time.Second)
	Sync(t, r, snap)
	if h := r.Health(); h.FullSyncs != 2 || h.PartialSyncs != 2 {
		t.Errorf("health %+v: want 2 full syncs (start, after a minute) and 2 partial (30s, and the changes before the full one)", h)
	}
}

// CheckChangesBeforeFullSync: the sync FullSyncPeriod after the last full
// one writes the changes it carries first, as a partial sync would, and the
// full sync right after, in the same Sync (kernelsync.Sync.ChangesFirst);
// when the partial write fails, the full sync still follows, and the Sync
// succeeds with the kernel what a fresh full sync writes.
func CheckChangesBeforeFullSync(t *testing.T, path Path) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	r := path.New(t, Options{FullSyncPeriod: time.Minute, Now: func() time.Time { return now }})
	Sync(t, r, History()[0])
	now = now.Add(61 * time.Second)
	writes := r.Writes()
	Sync(t, r, History()[1]) // an endpoint leaves, past the period
	if n := r.Writes() - writes; n != 2 {
		t.Errorf("%d writes, want 2: the change, then the full sync", n)
	}
	if h := r.Health(); h.FullSyncs != 2 || h.PartialSyncs != 1 || !h.Healthy {
		t.Errorf("health %+v: want the first sync full, then a partial and a full one", h)
	}
	compare(t, nil, r.Dump(), fresh(t, path, History()[1]))

	now = now.Add(61 * time.Second)
	failed := r.FailNext() // the first write, the changes'
	Sync(t, r, History()[2])
	h := r.Health()
	if h.FullSyncs != 3 || h.PartialFailures != 1 || h.Failures != 1 || !h.Healthy {
		t.Errorf("health %+v: want the partial write failed (%q) and the full sync after it", h, failed)
	}
	compare(t, nil, r.Dump(), fresh(t, path, History()[2]))
}

// CheckNoSyncBeforeSnapshot: before the first Snapshot there is nothing to
// apply, so a new mode's resync (its periodic one, a restarted process's
// first) leaves what it finds alone.
func CheckNoSyncBeforeSnapshot(t *testing.T, path Path) {
	r := path.New(t, Options{})
	Sync(t, r, History()[0])
	before, n0 := r.Dump(), r.Writes()
	r.Restart(t)
	if err := r.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.Writes() != n0 || r.Dump() != before {
		t.Errorf("a resync before the first Snapshot changed the kernel:\n%s", r.Dump())
	}
	if h := r.Health(); h.Synced {
		t.Errorf("health %+v: want not synced before the first Snapshot", h)
	}
}

// CheckSyncFailure: a failed write is reported in the health, and the next
// sync (the resync that retries it) is a full one that leaves what a full sync from scratch writes.
func CheckSyncFailure(t *testing.T, path Path) {
	r := path.New(t, Options{})
	Sync(t, r, History()[0])
	msg := r.FailNext()
	if err := r.Sync(context.Background(), History()[1]); err == nil {
		t.Fatal("sync succeeded with a failing write")
	}
	h := r.Health()
	if h.Healthy || !strings.Contains(h.LastError, msg) || h.Failures != 1 || h.ConsecutiveFailures != 1 || !h.Synced {
		t.Errorf("after a failure: health %+v, want unhealthy, one failure saying %q", h, msg)
	}
	if err := r.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = r.Health()
	if !h.Healthy || h.LastError != "" || h.FullSyncs != 2 || h.ConsecutiveFailures != 0 {
		t.Errorf("after recovery: health %+v, want healthy after a second full sync", h)
	}
	if got, want := r.Dump(), fresh(t, path, History()[1]); got != want {
		t.Errorf("after recovery:\n%s\nwant:\n%s", got, want)
	}
}

// CheckConntrackCleanup: UDP flows to a removed endpoint are deleted, flows
// to the others stay; a UDP port getting its first endpoints clears the flows
// to its addresses (also one sent while it was rejected).
func CheckConntrackCleanup(t *testing.T, path Path) {
	vip := netip.MustParseAddr("198.18.0.53")
	client := netip.MustParseAddrPort("198.19.1.50:5353")
	flow := func(dst, ep string) conntrack.Flow {
		return conntrack.Flow{Protocol: "udp", Src: client, OrigDst: netip.MustParseAddrPort(dst), DstNAT: netip.MustParseAddrPort(ep)}
	}
	dns := func(eps []service.Endpoint) *service.Snapshot {
		return st.Snapshot(st.Service("dns", "198.18.0.53", 53, eps, st.WithProtocol(service.UDP), st.WithNodePort(30053)))
	}
	ct := conntrack.NewFake()
	r := path.New(t, Options{Conntrack: ct})
	Sync(t, r, dns(st.ThreeEndpoints()))
	ct.Add(flow("198.18.0.53:53", "198.19.1.10:8080"), flow("198.18.0.53:53", "198.19.1.11:8080"),
		flow("198.19.0.1:30053", "198.19.1.10:8080"))
	Sync(t, r, dns(st.ThreeEndpoints()[1:]))
	if got, want := ct.Flows(), []conntrack.Flow{flow("198.18.0.53:53", "198.19.1.11:8080")}; !slices.Equal(got, want) {
		t.Errorf("flows after removing 198.19.1.10: %v, want %v", got, want)
	}

	Sync(t, r, dns(nil))
	ct.Add(flow("198.18.0.53:53", "198.18.0.53:53")) // sent while rejected
	before := len(ct.Deletes())
	Sync(t, r, dns(st.ThreeEndpoints()))
	if got := ct.Flows(); len(got) != 0 {
		t.Errorf("flows after the first endpoints: %v, want none", got)
	}
	want := []conntrack.Filter{{Protocol: "udp", OrigDstPort: 30053, Family: conntrack.IPv4}, {Protocol: "udp", OrigDst: vip, OrigDstPort: 53, Family: conntrack.IPv4}}
	if got := ct.Deletes()[before:]; !slices.Equal(got, want) {
		t.Errorf("deletes %v, want %v", got, want)
	}
	if h := r.Health(); h.ConntrackDeleted != 4 {
		t.Errorf("health %+v: want 4 conntrack entries deleted (2 of the removed endpoint, 1 of the last one, 1 sent while rejected)", h)
	}
}
