package servicetest

import (
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

// Path is one kernel path's proxier on a Fake, as CheckUnrendered and
// CheckPartialSyncs drive it.
type Path interface {
	// Sync applies snap with the proxier: its first sync is full, the next
	// ones may be partial.
	Sync(t *testing.T, snap *service.Snapshot)
	// Restart replaces the proxier with a new one over the same Fake, as a
	// new process does: its first sync is full.
	Restart(t *testing.T)
	// State is what the path holds: the Fake's state and the proxier's
	// status, as text.
	State(t *testing.T) string
}

// CheckUnrendered checks the promise of Unrendered on one path: for each
// Variant of a field Unrendered lists, the path writes exactly what it writes
// for VariantBase. To show that the state it is given sees the port at all,
// some variant of a field it reads must change it. newPath returns a path on a
// new, empty Fake.
func CheckUnrendered(t *testing.T, newPath func(t *testing.T) Path) {
	t.Helper()
	state := func(snap *service.Snapshot) string {
		p := newPath(t)
		p.Sync(t, snap)
		return p.State(t)
	}
	base := state(VariantBase())
	seen := false
	for _, v := range Variants() {
		got := state(v.Snap)
		switch {
		case !v.Unrendered:
			seen = seen || got != base
		case got != base:
			t.Errorf("%s: servicetest.Unrendered says no renderer reads it, yet this path writes something else "+
				"when it changes: compare it in service.Port.RendersSameAs and drop it from the list\n--- base:\n%s\n--- %s changed:\n%s",
				v.Field, base, v.Field, got)
		}
	}
	if !seen {
		t.Errorf("no variant changes what the path holds: its state does not show the port\n%s", base)
	}
}

// CheckPartialSyncs checks a path's partial syncs against every Variant: a
// path that synced VariantBase, then the variant (a partial sync, which keeps
// what service.Port.RendersSameAs calls unchanged), must hold what a full
// sync of the variant over VariantBase's state writes (a restarted
// proxier's). compare reports a difference between the two states; nil: they
// must be equal. It checks CheckUnrendered too.
func CheckPartialSyncs(t *testing.T, newPath func(t *testing.T) Path, compare func(t *testing.T, partial, full string)) {
	t.Helper()
	CheckUnrendered(t, newPath)
	for _, v := range Variants() {
		t.Run(v.Field, func(t *testing.T) {
			var states [2]string
			for i, restart := range []bool{false, true} {
				p := newPath(t)
				p.Sync(t, VariantBase())
				if restart {
					p.Restart(t)
				}
				p.Sync(t, v.Snap)
				states[i] = p.State(t)
			}
			partial, full := states[0], states[1]
			if compare != nil {
				compare(t, partial, full)
			} else if partial != full {
				t.Errorf("after a partial sync that changed %s:\n%s\nwant what a full sync writes:\n%s", v.Field, partial, full)
			}
		})
	}
}
