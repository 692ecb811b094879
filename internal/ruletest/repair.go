package ruletest

import (
	"strings"
	"testing"
	"time"
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
