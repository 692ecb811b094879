package ruletest

import (
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
)

// FakeLoss is what another program does to a path's rules on its Fake, for
// CheckRepaired.
type FakeLoss struct {
	Name string
	Do   func(t *testing.T, r Rig)
	// Repair is what Health.LastRepair says of it.
	Repair string
	// Compare reports how the repaired state differs from the state before
	// the loss; nil compares them for equality.
	Compare Compare
}

// CheckRepaired: periodic syncs are partial while the rules are as the last
// full sync left them; once per SyncPeriod a sync checks them, and the one
// that finds a loss (each in turn, on a new Rig) is full and writes
// everything again. A sync before SyncPeriod has passed trusts what it wrote.
func CheckRepaired(t *testing.T, path Path, losses ...FakeLoss) {
	for _, loss := range losses {
		t.Run(loss.Name, func(t *testing.T) {
			now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			r := path.New(t, Options{SyncPeriod: 30 * time.Second, Now: func() time.Time { return now }})
			snap := History()[0]
			Sync(t, r, snap)
			want := r.Dump()
			now = now.Add(30 * time.Second)
			Sync(t, r, snap) // checked: intact
			if h := r.Health(); h.FullSyncs != 1 || h.PartialSyncs != 1 || h.Repairs != 0 {
				t.Fatalf("health %+v: want the periodic sync partial, no repair", h)
			}
			loss.Do(t, r)
			now = now.Add(10 * time.Second)
			Sync(t, r, snap) // not checked yet: less than SyncPeriod since
			if h := r.Health(); h.Repairs != 0 || r.Dump() == want {
				t.Fatalf("health %+v: checked before SyncPeriod passed", h)
			}
			now = now.Add(20 * time.Second)
			Sync(t, r, snap) // checked: the loss is found
			h := r.Health()
			if h.FullSyncs != 2 || h.Repairs != 1 || !strings.Contains(h.LastRepair, loss.Repair) {
				t.Errorf("health %+v: want a full sync that repairs, LastRepair saying %q", h, loss.Repair)
			}
			compare(t, loss.Compare, r.Dump(), want)
		})
	}
}

// Loss is what another program does to a path's rules in KernelRepaired.
type Loss struct {
	Name string
	Do   func(t *testing.T, l *offloadtest.Lab)
}

// KernelRepaired: another program damages the path's rules (each loss in
// turn): the next periodic check (the mode's resync, every SyncPeriod)
// notices, that sync is full and writes everything again, and traffic to the
// Service flows once more. The test waits for the repair in the sync record,
// never for a time.
func KernelRepaired(t *testing.T, path KernelPath, losses ...Loss) {
	l := NewLab(t, path)
	l.ServeTCP(t, 8080)
	mode := l.Mode(t, Options{SyncPeriod: 100 * time.Millisecond})
	health := mode.Health
	l.RunOnNode(t, mode, l.Web())
	waitHealth(t, health, "the first sync", func(h kernelsync.Health) bool { return h.FullSyncs == 1 })
	if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 3); err != nil {
		t.Fatal(err)
	}
	for i, loss := range losses {
		n := health().PartialSyncs // intact: the periodic syncs are partial
		waitHealth(t, health, "a partial sync", func(h kernelsync.Health) bool { return h.PartialSyncs > n })
		loss.Do(t, l.Lab)
		waitHealth(t, health, "the repair after "+loss.Name, func(h kernelsync.Health) bool {
			return h.Repairs == uint64(i+1) && h.FullSyncs == uint64(i+2)
		})
		if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 3); err != nil {
			t.Errorf("after %s and the repair: %v\n%s", loss.Name, err, path.List(t, l.Lab))
		}
	}
}

// waitHealth waits until the sync record satisfies ok: the readiness signal
// of a sync that the mode makes on its own. It gives up after a minute, which
// only a broken repair needs (a sync here takes milliseconds).
func waitHealth(t *testing.T, health func() kernelsync.Health, what string, ok func(kernelsync.Health) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok(health()) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: health %+v", what, health())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
