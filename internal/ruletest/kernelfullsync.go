package ruletest

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// ProbedMode is a path's mode for o on l's node whose writes to the kernel
// call *before, when it is set, as each begins (a Restore, an nft
// transaction): KernelChangesBeforeFullSync's view between two writes.
type ProbedMode func(t *testing.T, l *Lab, o Options, before *func()) KernelRig

// KernelChangesBeforeFullSync: the sync FullSyncPeriod after the last full
// one writes the change it carries first, as a partial sync would
// (kernelsync.Sync.ChangesFirst): when the full sync's write begins, the
// kernel already serves the change (web's one endpoint left, b0, answers
// every connection), and after it the rules are what a new process's full
// sync writes.
func KernelChangesBeforeFullSync(t *testing.T, path KernelPath, newMode ProbedMode) {
	l := NewLab(t, path)
	l.ServeTCP(t, 8080)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var before func()
	r := newMode(t, l, Options{FullSyncPeriod: time.Minute, Now: func() time.Time { return now }}, &before)
	l.Sync(t, r, l.Web())
	now = now.Add(time.Minute)
	var served []string // web's backends as each write began: the partial, the full
	before = func() {
		answers, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 12)
		if err != nil {
			t.Error(err)
		}
		backends := map[string]bool{}
		for _, a := range answers {
			backends[a.Backend] = true
		}
		served = append(served, strings.Join(slices.Sorted(maps.Keys(backends)), " "))
	}
	one := st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(8080)[:1]))
	l.Sync(t, r, one)
	before = nil
	if want := []string{"b0 b1 b2", "b0"}; !slices.Equal(served, want) {
		t.Errorf("web's backends as each write began: %q, want %q (the change served before the full sync's write)", served, want)
	}
	if h := r.Health(); h.FullSyncs != 2 || h.PartialSyncs != 1 || !h.Healthy {
		t.Errorf("health %+v: want the first sync, then the change's partial one and the full one", h)
	}
	got := rulesOnly(path.List(t, l.Lab))
	l.Sync(t, l.Mode(t, Options{}), one) // a new process: a full sync of the same
	if want := rulesOnly(path.List(t, l.Lab)); got != want {
		t.Errorf("after the periodic full sync:\n%s\nwant what a new process's full sync writes:\n%s", got, want)
	}
}

// counts are iptables-save -c's packet and byte counts.
var counts = regexp.MustCompile(`\[\d+:\d+\]`)

// rulesOnly is a listing without what changes by itself: comment lines
// (iptables-save's say when they were made) and iptables' counts.
func rulesOnly(listing string) string {
	var out []string
	for _, line := range strings.Split(listing, "\n") {
		if !strings.HasPrefix(line, "#") {
			out = append(out, counts.ReplaceAllString(line, "[]"))
		}
	}
	return strings.Join(out, "\n")
}
